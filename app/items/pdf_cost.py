"""What extracting a PDF's text will cost, counted before pypdf parses any drawing command.

Run in the file worker process, by :mod:`app.items.pdf`.  pypdf parses a form XObject's
drawing commands again at each ``Do`` that draws it, and builds every font of a resource
dictionary (its ``/ToUnicode`` map, its ``/W`` widths) again for each page and for each form it
draws.  :func:`check` walks the pages once (each stream inflated once, each form and each font
costed once and remembered) and multiplies: drawing a form costs its own commands and fonts
plus, for each ``Do`` in its commands, the cost of the form drawn.  The totals over all pages
are held to two bounds, refused with :class:`TooCostly` in milliseconds:

* ``content``: bytes of drawing commands parsed, forms counted at each draw (nested forms drawn
  10 x 10 x 10 times, 1 MB each: 1 GB);
* ``font_entries``: character-map entries built, fonts counted for each page and form drawn
  that uses them (200 fonts sharing one 65,536-code map: 13 million).

The count errs high, never low: a ``Do`` inside a string is counted, a name that is not in the
resources costs the dearest form of its dictionary (an image costs nothing), a ``bfrange``
counts its whole range, and pypdf's cap on form draws per page is not relied on.
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 32  # forms nested deeper than this are not followed (pypdf recurses; see pdf.py)
FONT_BASE = 256  # a font's simple encoding: built for every font
_DELIM = rb"\s/\[\]()<>{}%"
_DO = re.compile(rb"/([^" + _DELIM + rb"]+)\s+Do(?![^" + _DELIM + rb"])")
_BEGIN = re.compile(rb"begin(bfrange|bfchar)")
_RANGE = re.compile(rb"<\s*([0-9A-Fa-f]{1,64})\s*>\s*<\s*([0-9A-Fa-f]{1,64})\s*>\s*"
                    rb"(?:<[^<>]*>|\[[^\[\]]*\])")  # a destination stops at the next bracket: linear
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")


class TooCostly(Exception):
    """A bound of :func:`check` is passed: ``message`` says which, for the client's 400."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _name(raw: bytes) -> str:
    """A content stream's name token as pypdf's ``NameObject`` spells it (``#xx`` decoded)."""
    return "/" + _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw).decode("utf-8", "replace")


def _dict(value: Any) -> Any:
    found = value.get_object() if value is not None and hasattr(value, "get_object") else value
    return found if hasattr(found, "items") else None


def _sections(data: bytes) -> list[tuple[bytes, bytes]]:
    """The ``bfrange`` / ``bfchar`` sections of a CMap, scanned once, left to right (linear:
    a section that never ends closes at the end of the data, and no later start is searched
    past it again)."""
    found: list[tuple[bytes, bytes]] = []
    at = 0
    while (m := _BEGIN.search(data, at)) is not None:
        kind = m.group(1)
        end = data.find(b"end" + kind, m.end())
        stop = len(data) if end < 0 else end
        found.append((kind, data[m.end():stop]))
        at = len(data) if end < 0 else end + 3 + len(kind)
    return found


def cmap_entries(data: bytes) -> int:
    """The entries pypdf builds from a ``/ToUnicode`` map: each ``bfrange`` its whole range,
    each ``bfchar`` pair one."""
    entries = 0
    for kind, body in _sections(data):
        if kind == b"bfchar":
            entries += body.count(b"<") // 2
        else:
            entries += sum(max(0, int(hi, 16) - int(lo, 16) + 1) for lo, hi in _RANGE.findall(body))
    return entries


def _width_entries(font: Any) -> int:
    """The widths pypdf builds from a composite font's ``/W`` arrays (``c [w ...]`` or
    ``c1 c2 w``)."""
    total = 0
    descendants = font.get("/DescendantFonts")
    descendants = descendants.get_object() if descendants is not None else None
    for ref in descendants if isinstance(descendants, list) else []:
        widths = _dict(ref)
        found = widths.get("/W") if widths is not None else None
        items = found.get_object() if found is not None else None
        if not isinstance(items, list):
            continue
        items = [item.get_object() for item in items]
        i = 0
        while i + 1 < len(items):
            first, second = items[i], items[i + 1]
            if isinstance(second, list):
                total, i = total + len(second), i + 2
            elif isinstance(first, int) and isinstance(second, int):
                total, i = total + max(0, second - first + 1), i + 3
            else:
                i += 1
    return total


class _Walk:
    def __init__(self, limits: dict[str, int]) -> None:
        self.content = limits["content"]
        self.fonts_bound = limits["font_entries"]
        self.forms: dict[int, tuple[int, int, int]] = {}  # id -> (bytes, font entries, draws)
        self.fonts: dict[int, int] = {}  # id -> entries
        self.open: set[int] = set()  # forms being costed (a cycle pypdf skips)

    def font(self, font: Any) -> int:
        if id(font) not in self.fonts:
            entries = FONT_BASE + _width_entries(font)
            found = font.get("/ToUnicode")
            cmap: Any = found.get_object() if found is not None else None
            if hasattr(cmap, "get_data"):
                entries += cmap_entries(cmap.get_data())
            self.fonts[id(font)] = entries
        return self.fonts[id(font)]

    def stream(self, data: bytes, resources: Any, depth: int) -> tuple[int, int, int]:
        """(bytes parsed, font entries built, forms drawn) when pypdf extracts ``data``."""
        resources = _dict(resources)
        fonts = _dict(resources.get("/Font")) if resources is not None else None
        entries = sum(self.font(f) for f in (_dict(v) for _, v in fonts.items()) if f is not None) \
            if fonts is not None else 0
        size, draws = len(data), 0
        xobjects = _dict(resources.get("/XObject")) if resources is not None else None
        if xobjects is None or depth >= MAX_DEPTH or b"Do" not in data:
            return size, entries, draws
        named = {str(name): _dict(value) for name, value in xobjects.items()}
        forms = {name: form for name, form in named.items()
                 if form is not None and form.get("/Subtype") == "/Form" and hasattr(form, "get_data")}
        dearest: tuple[int, int, int] | None = None  # what a name not in the dictionary is charged
        for found in _DO.finditer(data):
            name = _name(found.group(1))
            if name in forms:
                cost = self.form(forms[name], depth)
            elif name in named:  # an image: pypdf draws no text from it
                continue
            else:
                if dearest is None:
                    dearest = max((self.form(f, depth) for f in forms.values()), default=(0, 0, 0))
                cost = dearest
            size, entries, draws = size + cost[0], entries + cost[1], draws + 1 + cost[2]
            self.bound(size, entries, draws)
        return size, entries, draws

    def form(self, form: Any, depth: int) -> tuple[int, int, int]:
        key = id(form)
        if key in self.open:
            return 0, 0, 0
        if key not in self.forms:
            self.open.add(key)
            try:
                self.forms[key] = self.stream(form.get_data(), form.get("/Resources"), depth + 1)
            finally:
                self.open.discard(key)
        return self.forms[key]

    def bound(self, size: int, entries: int, draws: int) -> None:
        if size > self.content:
            raise TooCostly(f"the PDF draws its forms to at least {size:,} bytes of drawing "
                            f"commands ({draws:,} form draws counted, each parsed again); at most "
                            f"{self.content:,} are read: is it built to be costly?")
        if entries > self.fonts_bound:
            raise TooCostly(f"the PDF's fonts build at least {entries:,} character-map entries (each font's "
                            "map is built again for each page and each form drawn that uses it); "
                            f"at most {self.fonts_bound:,} are read: is it built to be costly?")


def check(pages: list[tuple[bytes, Any]], limits: dict[str, int]) -> None:
    """Refuse (:class:`TooCostly`) ``pages`` — each page's drawing commands and resources —
    whose text extraction would pass ``limits["content"]`` or ``limits["font_entries"]``."""
    walk = _Walk(limits)
    size = entries = draws = 0
    for data, resources in pages:
        more = walk.stream(data, resources, 0)
        size, entries, draws = size + more[0], entries + more[1], draws + more[2]
        walk.bound(size, entries, draws)
