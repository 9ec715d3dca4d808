"""app.tools.browser and the browser functions of app.tools.web: displays and cursors as
gpt-oss's browser shows them, links, scrolling, find, and ``【cursor†L…】`` citations (with
hypothesis: any text, any page)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.tools import web
from app.tools.browser import Browser, Display, Source, earlier_cursors, find_display, results_display, wrap
from app.tools.search import Hit, Page

A, B = "https://a.example/doc", "https://b.example/x"


class Provider:
    external = False

    def __init__(self, pages: dict[str, Page]) -> None:
        self.pages = pages

    async def search(self, query: str, *, limit: int, domains: Sequence[str] = ()) -> list[Hit]:
        return [Hit(p.url, p.title, p.text.split("\n")[0]) for p in self.pages.values()][:limit]

    async def page(self, url: str) -> Page | None:
        return self.pages.get(url)


def toolbox(budget: int = 32_768) -> web.WebSearchToolbox:
    long = "\n".join(f"line {n} of b" + (" needle" if n == 30 else "") for n in range(60))
    return web.WebSearchToolbox(Provider({A: Page(A, "Doc A", "Alpha text.\nSecond line."),
                                          B: Page(B, "Doc B", long)}), max_output_chars=budget)


@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=400), st.integers(1, 30))
def test_wrap_keeps_every_character_but_the_spaces_it_breaks_at(text: str, width: int) -> None:
    lines = wrap(text, width)
    assert all(len(line) <= width for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "").replace("\n", "")
    assert len(lines) >= text.count("\n") + 1


@given(st.text(alphabet=st.sampled_from("【】†L0123456789- xa"), max_size=200))
def test_citations_of_any_text_are_spans_of_whole_citations(text: str) -> None:
    browser = Browser()
    browser.push(Display("Doc A", A, ("x",) * 20))
    for note in browser.citations(text):
        cited = text[note["start_index"]:note["end_index"]]
        assert cited.startswith("【0†") and cited.endswith("】") and note["url"] == A


def test_a_results_page_cites_the_hit_on_the_cited_line() -> None:
    browser = Browser()
    results = results_display("q", [Hit(A, "Doc 【A】", "one"), Hit(B, "Doc B", "two " * 30)])
    assert results.lines[0] == "【0†Doc  A†a.example】"  # link delimiters leave the title
    assert browser.push(results) == 0 and browser.push(Display("Doc B", B, ("b",))) == 1
    text = "A 【0†L1】, B 【0†L3-L4】, page 【1†L0】, unknown 【7†L0】, not one 【0†L99】."
    assert [(n["url"], text[n["start_index"]:n["end_index"]]) for n in browser.citations(text)] == [
        (A, "【0†L1】"), (B, "【0†L3-L4】"), (B, "【1†L0】")]


def test_cursors_go_on_after_earlier_turns_which_stay_citable() -> None:
    earlier = [{"type": "web_search_call", "ocm:output": f"[4] Doc A ({A})\n**viewing lines [0 - 1] of 1**"},
               {"type": "web_search_call", "ocm:output": "[5] Search results for `a (b)`\n**viewing"},
               {"type": "web_search_call", "action": {"type": "search"}}]  # from another server: no cursor
    cursors = earlier_cursors(earlier)
    assert cursors == {4: Source(A, "Doc A"), 5: Source("", "Search results for `a (b)`")}
    browser = Browser(cursors)
    assert browser.push(Display("Doc B", B, ("b",))) == 6
    notes = browser.citations("【4†L2】 【5†L0】 【6†L0】")
    assert [(n["url"], n["title"]) for n in notes] == [(A, "Doc A"), (B, "Doc B")]


def test_find_links_to_its_matches() -> None:
    page = Display("Doc B", B, tuple(f"l{n}" + (" Needle" if n in (3, 5, 20) else "") for n in range(30)))
    found = find_display(page, "needle")
    links = [line for line in found.lines if line.startswith("#")]
    assert links == ["# 【0†match at L3】", "# 【1†match at L20】"]
    assert found.anchors == {0: 3, 1: 20} and found.source(0) == Source(B, "Doc B")
    assert find_display(page, "absent").lines == ("No `find` results for pattern: `absent`",)


async def test_search_open_a_link_scroll_and_find() -> None:
    box = toolbox(budget=400)
    first = await box.call(web.SEARCH, json.dumps({"query": "doc"}))
    assert first.output.startswith("[0] Search results for `doc`\n**viewing lines [0 - ")
    assert "L0: 【0†Doc A†a.example】" in first.output and "【1†Doc B†b.example】" in first.output
    opened = await box.call(web.OPEN, json.dumps({"id": 1}))  # link 1 of the last display
    assert opened.output.startswith(f"[1] Doc B ({B})\n**viewing lines [0 - ")
    assert opened.detail == {"action": {"type": "open_page", "url": B}}
    shown = re.search(r"viewing lines \[0 - (\d+)\] of 59", opened.output)
    assert shown is not None and int(shown.group(1)) < 59  # the budget cut the view
    scrolled = await box.call(web.OPEN, json.dumps({"loc": 40, "num_lines": 3}))  # no id: scroll
    assert "viewing lines [40 - 42] of 59" in scrolled.output
    assert scrolled.output.endswith("L42: line 42 of b")
    found = await box.call(web.FIND, json.dumps({"pattern": "NEEDLE", "cursor": 1}))
    assert found.output.startswith("[3] Find results for text: `NEEDLE` in `Doc B`")
    assert "L0: # 【0†match at L30】" in found.output
    at_match = await box.call(web.OPEN, json.dumps({"id": 0}))  # opens the page just above the match
    assert "viewing lines [26 - " in at_match.output and "L30: line 30 of b needle" in at_match.output
    direct = await box.call(web.OPEN, json.dumps({"id": A, "cursor": 99}))
    assert direct.output.startswith(f"[5] Doc A ({A})")


@pytest.mark.parametrize(("name", "args", "says"), [
    (web.OPEN, {"id": 0}, "No page at cursor -1"),
    (web.OPEN, {"id": "https://elsewhere.example/"}, "No page 'https://elsewhere.example/'"),
    (web.FIND, {"pattern": "x"}, "find needs a pattern and an opened page"),
])
async def test_calls_that_cannot_be_done_are_errors_the_model_reads(name: str, args: dict[str, object],
                                                                     says: str) -> None:
    outcome = await toolbox().call(name, json.dumps(args))
    assert outcome.error is not None and says in outcome.error


async def test_a_link_that_is_not_there_and_find_on_results() -> None:
    box = toolbox()
    await box.call(web.SEARCH, json.dumps({"query": "doc"}))
    missing = await box.call(web.OPEN, json.dumps({"id": 9}))
    assert missing.error == "There is no link 9 on the page at cursor -1."
    on_results = await box.call(web.FIND, json.dumps({"pattern": "x"}))
    assert on_results.error is not None and "not on search or find results" in on_results.error
