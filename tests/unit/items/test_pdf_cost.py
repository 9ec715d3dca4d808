"""The PDF work bound counted before parsing (app/items/pdf_cost.py, issue 35 item 3): nested
forms multiplied by their draws and fonts by the pages and forms that use them are refused in
milliseconds with a 400 that says why, instead of running into the worker's time budget."""

from __future__ import annotations

import io
import time
from typing import Any

import pypdf
import pytest

from app.items import files, pdf_cost
from tests.support import pdf
from tests.unit.items.test_file_bombs import _read

LIMITS = {"content": files.MAX_CONTENT, "font_entries": files.MAX_FONT_ENTRIES}


def _pages(data: bytes) -> list[tuple[bytes, Any]]:
    reader = pypdf.PdfReader(io.BytesIO(data))
    out = []
    for page in reader.pages:
        contents = page.get_contents()
        out.append((contents.get_data() if contents is not None else b"", page.get("/Resources")))
    return out


def _refusal(data: bytes, **limits: int) -> str:
    with pytest.raises(pdf_cost.TooCostly) as refused:
        pdf_cost.check(_pages(data), {**LIMITS, **limits})
    return refused.value.message


def test_the_nested_forms_of_the_benchmark_are_refused_before_parsing() -> None:
    """10 x 10 x 10 draws of a 1 MB form: 1 GB of drawing commands (the worker ran into its 5 s
    budget before); refused by the count, without one operator parsed."""
    bomb = pdf.make_form_bomb(uses=10, size=1_000_000, depth=3)
    started = time.monotonic()
    message = _refusal(bomb)
    assert time.monotonic() - started < 2
    assert "form draws counted, each parsed again" in message and "at most 8,388,608" in message
    message, took = _read(bomb)  # the same through the worker: a 400 naming the cause
    assert "form draws counted, each parsed again" in message and took < 4


def test_the_font_bomb_of_the_benchmark_is_refused_before_parsing() -> None:
    """200 fonts sharing one 65,536-code /ToUnicode map: 13 million entries pypdf would build."""
    bomb = pdf.make_font_bomb(200)
    message = _refusal(bomb)
    assert "character-map entries" in message and "13,1" in message and "at most 1,000,000" in message
    message, took = _read(bomb)
    assert "character-map entries" in message and took < 4


def test_fonts_count_again_in_every_form_drawn() -> None:
    """A font in a form's resources is built at each draw of the form: 20 fonts x 65,536 codes
    pass alone (1.3 M under a 2 M bound), drawn by a form 10 times they do not."""
    fonts = pdf.make_font_bomb(20)
    pdf_cost.check(_pages(fonts), {**LIMITS, "font_entries": 2_000_000})
    walk = pdf_cost._Walk({**LIMITS, "font_entries": 2_000_000})
    page, resources = _pages(fonts)[0]
    _, entries, _ = walk.stream(page, resources, 0)
    assert entries == 20 * (65_536 + pdf_cost.FONT_BASE) + pdf_cost.FONT_BASE
    with pytest.raises(pdf_cost.TooCostly):
        walk.stream(b"/F1 1 Tf " + b"/Fm Do " * 10, _FormResources(resources), 0)


class _FormResources(dict):  # type: ignore[type-arg]
    """A page's resources whose one XObject is a form using the fonts of ``resources``."""

    def __init__(self, resources: Any) -> None:
        class Form(dict):  # type: ignore[type-arg]
            def get_data(self) -> bytes:
                return b"BT /F2 1 Tf (a) Tj ET"

        super().__init__({"/XObject": {"/Fm": Form({"/Subtype": "/Form", "/Resources": resources})}})


def test_cmap_entries_count_what_pypdf_builds() -> None:
    cmap = (b"begincmap\n2 beginbfrange\n<0000> <00FF> <0020>\n<0100> <0103> [<0041> <0042> <0043> "
            b"<0044>]\nendbfrange\n3 beginbfchar\n<01> <0041>\n<02> <0042>\n<03> <0043>\nendbfchar\n"
            b"endcmap")
    assert pdf_cost.cmap_entries(cmap) == 256 + 4 + 3
    assert pdf_cost.cmap_entries(b"1 beginbfrange\n<00FF> <0000> <0020>\nendbfrange") == 0  # empty range
    assert pdf_cost.cmap_entries(b"no map at all") == 0


def test_an_ordinary_pdf_and_a_form_drawn_a_few_times_are_read() -> None:
    text, _ = _read(pdf.make_pdf("Quarterly report.", "Page two."))
    assert "Quarterly report." in text and "Page two." in text
    text, _ = _read(pdf.make_form_bomb(uses=3, size=20_000))
    assert text.startswith("<file name=") and "Cover" in text
    fonts = pdf.make_font_bomb(10, 1_000)  # 10 fonts with a 1,000-code map each: 12,816 entries
    assert "Cover" in _read(fonts)[0]


def test_a_name_not_in_the_dictionary_costs_the_dearest_form() -> None:
    """``/Missing Do`` finds no form: charged as the dearest form of the dictionary, so a
    misspelt (or escaped) name cannot hide a draw."""
    bomb = pdf.make_form_bomb(uses=10, size=1_000_000, depth=1)
    _, resources = _pages(bomb)[0]
    walk = pdf_cost._Walk(LIMITS)
    size, _, draws = walk.stream(b"/Missing Do /F#6d Do", resources, 0)  # /F#6d is /Fm escaped
    assert draws == 2 and size > 2 * 1_000_000


def test_a_form_that_draws_itself_ends() -> None:
    """A cycle (pypdf skips it): costed once, no recursion past the first round."""
    class Form(dict):  # type: ignore[type-arg]
        def get_data(self) -> bytes:
            return b"/Fm Do " * 5

    form = Form({"/Subtype": "/Form"})
    form["/Resources"] = {"/XObject": {"/Fm": form}}
    size, _, draws = pdf_cost._Walk(LIMITS).stream(b"/Fm Do", form["/Resources"], 0)
    assert draws == 6 and size == len(b"/Fm Do") + len(b"/Fm Do " * 5)


def test_images_drawn_cost_nothing() -> None:
    """A page that draws an image 1,000 times beside a form: the image's draws are free (pypdf
    reads no text from them), the one form draw is charged."""
    class Form(dict):  # type: ignore[type-arg]
        def get_data(self) -> bytes:
            return b"x" * 100_000

    resources = {"/XObject": {"/Im1": {"/Subtype": "/Image"}, "/Fm": Form({"/Subtype": "/Form"})}}
    size, _, draws = pdf_cost._Walk(LIMITS).stream(b"/Im1 Do " * 1000 + b"/Fm Do", resources, 0)
    assert draws == 1 and size == len(b"/Im1 Do " * 1000 + b"/Fm Do") + 100_000


def test_a_map_of_sections_that_never_end_is_counted_in_one_pass() -> None:
    # 64,000 unterminated starts (1.1 MB): a lazy "begin ... end" pattern retried from each
    # start is quadratic (144 KB took 28 s); the scan reads the map once.
    hostile = b"beginbfrange <00> " * 64_000
    counter = {"calls": 0}
    real_search = pdf_cost._BEGIN.search

    class Counting:
        def search(self, data: bytes, at: int) -> Any:
            counter["calls"] += 1
            return real_search(data, at)

    original = pdf_cost._BEGIN
    pdf_cost._BEGIN = Counting()  # type: ignore[assignment]
    try:
        assert pdf_cost.cmap_entries(hostile) == 0  # "<00>" alone is no range
    finally:
        pdf_cost._BEGIN = original
    assert counter["calls"] == 2  # the first start swallows the rest: one section, then the end
    # sections that do end are all found, bfchar and bfrange alike
    ok = b"beginbfchar <01> <02> endbfchar " * 3 + b"beginbfrange <00> <0f> <00> endbfrange"
    assert pdf_cost.cmap_entries(ok) == 3 + 16


def test_ranges_whose_destination_never_closes_are_counted_in_one_pass() -> None:
    # "<0><0>[" 160,000 times (1.1 MB, no "]"): a destination pattern that runs to the next "]"
    # from every start is quadratic (140 KB took 7.9 s); each start now stops at the next bracket.
    hostile = b"beginbfrange " + b"<0><0>[" * 160_000
    started = time.process_time()
    assert pdf_cost.cmap_entries(hostile) == 0
    assert time.process_time() - started < 2.0  # ~0.1 s; quadratic is minutes
    assert pdf_cost.cmap_entries(b"beginbfrange <00> <01> [<41> <42>] <02> <03> <43> endbfrange") == 4
