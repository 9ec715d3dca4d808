"""The offline web index (app/tools/search_index.py): what it reads, how it ranks, what it
refuses to parse, and when it rebuilds.  Corpus: tests/fixtures/web_corpus (see its SOURCES)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.tools.search_index import OfflineIndex, build, documents, match_expression

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "web_corpus"


def test_documents_of_every_format() -> None:
    found = {url: (title, text) for url, title, text in documents(CORPUS)}
    assert set(found) == {
        "https://www.openresponses.org/", "https://cookbook.openai.com/articles/openai-harmony",
        "https://github.com/ggml-org/llama.cpp/tree/master/tools/server",
        "https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html"}  # bad JSONL lines skipped
    title, text = found["https://cookbook.openai.com/articles/openai-harmony"]
    assert title == "OpenAI Harmony Response Format"
    assert "analysis for chain of thought" in text and "secret" not in text and "color" not in text
    title, text = found["https://www.openresponses.org/"]
    assert title == "Open Responses" and "url:" not in text


def test_a_file_without_a_url_is_addressed_by_its_path(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# Quokkas\n\nQuokkas smile.")
    assert list(documents(tmp_path)) == [("offline:/notes/a.md", "Quokkas", "# Quokkas\n\nQuokkas smile.")]


async def test_search_ranks_and_filters(tmp_path: Path) -> None:
    index = await OfflineIndex.open(CORPUS, tmp_path / "index.sqlite3")
    assert index.size == 4
    hits = await index.search("Find the most relevant cached result for OpenResponses.", limit=3)
    assert hits[0].url == "https://www.openresponses.org/"  # the conformance case's query
    hits = await index.search("harmony channels", limit=5)
    assert hits[0].url == "https://cookbook.openai.com/articles/openai-harmony"
    assert "channels" in hits[0].snippet.lower()
    only = await index.search("server", limit=5, domains=["docs.vllm.ai"])
    assert [h.url for h in only] == ["https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html"]
    assert await index.search("server", limit=5, domains=["vllm.ai"]) == only  # subdomains count
    assert await index.search("server", limit=5, domains=["ai"]) != []  # a suffix at a dot boundary
    assert await index.search("server", limit=5, domains=["llm.ai"]) == []  # not a dot boundary
    assert await index.search("?!* ()", limit=5) == []
    hits = await index.search("OpenResponses", limit=5)  # a camel-case word finds its parts
    assert hits[0].url == "https://www.openresponses.org/"
    page = await index.page("https://www.openresponses.org/")
    assert page is not None and page.title == "Open Responses" and "agentic loop" in page.text
    assert await index.page("https://example.com/") is None
    index.close()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_no_query_is_fts_syntax(query: str) -> None:
    expression = match_expression(query)
    assert expression is None or all(part.startswith('"') and part.endswith('"') and part.count('"') == 2
                                     for part in expression.split(" OR "))


async def test_hostile_queries_never_raise(tmp_path: Path) -> None:
    index = await OfflineIndex.open(CORPUS, tmp_path / "index.sqlite3")
    for query in ('" OR 1=1 --', "NEAR(a b)", "title:harmony", "*", "a" * 100_000, "\x00", "é" * 50):
        assert isinstance(await index.search(query, limit=5), list)
    index.close()


async def test_rebuilt_when_the_documents_change(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    target = tmp_path / "index.sqlite3"
    first = await OfflineIndex.open(corpus, target)
    assert await first.search("wombat", limit=5) == []
    first.close()
    stamp = target.stat().st_mtime_ns
    again = await OfflineIndex.open(corpus, target)  # unchanged: not rebuilt
    again.close()
    assert target.stat().st_mtime_ns == stamp
    (corpus / "wombat.md").write_text("# Wombats\n\nWombats have cube-shaped droppings.")
    second = await OfflineIndex.open(corpus, target)
    assert [h.title for h in await second.search("wombat", limit=5)] == ["Wombats"]
    second.close()


def test_build_counts_documents(tmp_path: Path) -> None:
    assert build(CORPUS / "servers.jsonl", tmp_path / "x.sqlite3") == 2


async def test_missing_documents_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await OfflineIndex.open(tmp_path / "nope")
