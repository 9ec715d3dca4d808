"""The browser's displays and cursors, as gpt-oss's built-in ``browser`` tool shows them.

Every successful browser call (a search, a page opened or scrolled, a find) pushes one
:class:`Display` and gets the next **cursor**.  What the model reads is::

    [3] Open Responses (https://www.openresponses.org/)
    **viewing lines [0 - 41] of 57**

    L0: Open Responses is an open-source specification ...

Page text is wrapped at :data:`WIDTH` characters and numbered ``L0``, ``L1``, ...; a results
page shows each hit as a link ``【id†title†domain】`` (``open(id)`` follows it) followed by its
snippet.  The model cites ``【cursor†L12】`` or ``【cursor†L9-L11】`` (openai-harmony's browser
description asks for exactly that); :meth:`Browser.citations` turns each citation of a known
cursor into a ``url_citation`` annotation over the citation's own characters (the text is
left as the model wrote it, so streamed deltas and the final text agree): a page's cursor
cites the page, a results page's cursor the hit on the cited line, find results their page.

Cursors go on across the turns of a conversation: :func:`earlier_cursors` reads the cursors
of earlier ``web_search_call`` items (their ``ocm:output`` starts ``[n]``), so a new response
numbers after them and an answer may cite them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from app.tools.search import Hit

WIDTH = 80
MAX_PAGE_CHARS = 1_000_000  # of a page's text, wrapped and numbered (the rest is not shown)
FIND_LINES = 4  # lines shown per find match
MAX_FIND = 20
_CITATION = re.compile(r"【(\d{1,9})†([^†】]{1,200})(?:†[^†】]{0,200})?】")
_LINES = re.compile(r"^\s*L(\d{1,9})(?:\s*-\s*L?(\d{1,9}))?\s*$")
_HEADER = re.compile(r"^\[(\d{1,9})\] ([^\n]*?)(?: \((\S+)\))?$", re.MULTILINE)


def wrap(text: str, width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` characters (broken at a space where there is one),
    in linear time whatever the text (no slice of the rest per line)."""
    out: list[str] = []
    for line in text[:MAX_PAGE_CHARS].split("\n"):
        start = 0
        while len(line) - start > width:
            cut = line.rfind(" ", start + 1, start + width + 1)
            if cut <= start:
                out.append(line[start:start + width])
                start += width
            else:
                out.append(line[start:cut])
                start = cut + 1
        out.append(line[start:])
    return out


def _plain(title: str) -> str:
    """A title inside a link: without the characters that delimit links and citations."""
    return re.sub(r"[【】†]", " ", title).strip()


def domain(url: str) -> str:
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url


@dataclass(frozen=True)
class Source:
    url: str
    title: str


@dataclass(frozen=True)
class Display:
    """One thing the browser showed: a page, a results page, or find results."""

    title: str
    url: str  # the page's URL; "" for a results page
    lines: tuple[str, ...]
    kind: str = "page"  # "page" | "results" | "find"
    links: Mapping[int, str] = field(default_factory=dict)  # link id → URL
    line_sources: tuple[Source | None, ...] = ()  # per line: what it shows (results, find results)
    anchors: Mapping[int, int] = field(default_factory=dict)  # link id → line of its target (find)

    def source(self, line: int) -> Source | None:
        """What a citation of ``line`` cites: the page, or the hit / page that line shows."""
        if self.line_sources:
            return self.line_sources[line] if 0 <= line < len(self.line_sources) else None
        return Source(self.url, self.title) if self.url else None

    def view(self, cursor: int, loc: int, num_lines: int, budget: int) -> str:
        """The display from line ``loc``: ``num_lines`` lines (≤ 0: as many as fit ``budget``
        characters, at least one)."""
        last = max(len(self.lines) - 1, 0)
        loc = min(max(loc, 0), last)
        header = f"[{cursor}] {self.title}" + (f" ({self.url})" if self.url else "")
        body: list[str] = []
        size = len(header) + 40
        for n in range(loc, len(self.lines)):
            line = f"L{n}: {self.lines[n]}"
            if (num_lines > 0 and len(body) >= num_lines) or (body and size + len(line) + 1 > budget):
                break
            body.append(line)
            size += len(line) + 1
        end = loc + max(len(body) - 1, 0)
        return f"{header}\n**viewing lines [{loc} - {end}] of {last}**\n\n" + "\n".join(body)


def results_display(query: str, hits: Sequence[Hit]) -> Display:
    lines: list[str] = []
    sources: list[Source | None] = []
    links: dict[int, str] = {}
    for k, hit in enumerate(hits):
        links[k] = hit.url
        shown = [f"【{k}†{_plain(hit.title)}†{domain(hit.url)}】", *wrap(hit.snippet), ""]
        lines += shown
        sources += [Source(hit.url, hit.title)] * len(shown)
    if not hits:
        lines, sources = [f"No results for {query!r}."], [None]
    return Display(f"Search results for `{query}`", "", tuple(lines), "results", links, tuple(sources))


def find_display(page: Display, pattern: str) -> Display:
    needle = pattern.lower()
    lines: list[str] = []
    links: dict[int, str] = {}
    anchors: dict[int, int] = {}
    n = 0
    while n < len(page.lines) and len(links) < MAX_FIND:
        if not needle or needle not in page.lines[n].lower():
            n += 1
            continue
        k = len(links)
        links[k], anchors[k] = page.url, n
        lines += [f"# 【{k}†match at L{n}】", *page.lines[n:n + FIND_LINES], ""]
        n += FIND_LINES
    if not links:
        lines = [f"No `find` results for pattern: `{pattern}`"]
    return Display(f"Find results for text: `{pattern}` in `{page.title}`", page.url, tuple(lines), "find",
                   links, (Source(page.url, page.title),) * len(lines), anchors)


def earlier_cursors(items: Iterable[Mapping[str, Any]]) -> dict[int, Source]:
    """The cursors of earlier ``web_search_call`` items (the header of the ``ocm:output``
    they keep, ``[n] title (url)``) and what each cites: its page (a results page, whose
    lines are not kept as links, cites nothing)."""
    out: dict[int, Source] = {}
    for item in items:
        kept = item.get("ocm:output") if item.get("type") == "web_search_call" else None
        found = _HEADER.match(kept.split("\n", 1)[0]) if isinstance(kept, str) else None
        if found is not None:
            out[int(found.group(1))] = Source(found.group(3) or "", found.group(2))
    return out


class Browser:
    """The displays of one response, by cursor (see the module's docstring)."""

    def __init__(self, earlier: Mapping[int, Source] | None = None) -> None:
        self._earlier = dict(earlier or {})
        self.first = max(self._earlier, default=-1) + 1
        self.displays: list[Display] = []

    def push(self, display: Display) -> int:
        self.displays.append(display)
        return self.first + len(self.displays) - 1

    def at(self, cursor: int) -> Display | None:
        """The display at ``cursor`` (-1: the last one) of this response."""
        if cursor < 0:
            return self.displays[-1] if self.displays else None
        n = cursor - self.first
        return self.displays[n] if 0 <= n < len(self.displays) else None

    def citations(self, text: str) -> list[dict[str, Any]]:
        """``url_citation`` annotations for the ``【cursor†L…】`` citations in ``text``."""
        out: list[dict[str, Any]] = []
        for m in _CITATION.finditer(text):
            cursor = int(m.group(1))
            lines = _LINES.match(m.group(2))
            shown = self.at(cursor)
            if shown is not None:
                source = shown.source(int(lines.group(1)) if lines else -1)
            else:
                source = self._earlier.get(cursor)
            if source is not None and source.url:
                out.append({"type": "url_citation", "url": source.url,
                            "title": source.title or domain(source.url),
                            "start_index": m.start(), "end_index": m.end()})
        return out
