"""The offline web index: a full-text index (SQLite FTS5) of documents the operator supplies.

``[tools.web_search] documents`` names a JSONL file (one ``{"url", "title", "text"}`` object
per line; ``content`` or ``body`` are read as ``text`` too) or a folder, read recursively:
``.jsonl`` files as above, ``.html`` / ``.htm`` (title from ``<title>``, URL from the
canonical link or ``og:url``, text without scripts and styles), ``.md`` / ``.txt`` (an
optional ``---`` front matter with ``url:`` and ``title:``, else the first heading or line
is the title).  A document without a URL of its own is addressed ``offline:/<its path>``.

The index is a SQLite file (``index``, or a file in the system's temp directory): rebuilt
when the documents change (their paths, sizes and times are its fingerprint), written to a
temporary file and moved into place, so a reader never sees half an index.  Queries use the
Porter stemmer and BM25 (titles weigh more than bodies); every word of the query is quoted,
so nothing the model writes is FTS syntax.  All SQLite work runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path

from app.config import ToolSettings
from app.tools.search import Hit, Page, SearchProvider, in_domains

log = logging.getLogger("ocm_gateway")
_WORD = re.compile(r"\w+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_MAX_QUERY_WORDS = 32
_MAX_DOC_CHARS = 2_000_000
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE pages (id INTEGER PRIMARY KEY, url TEXT UNIQUE NOT NULL, title TEXT NOT NULL,
                    body TEXT NOT NULL);
CREATE VIRTUAL TABLE docs USING fts5(title, body, content='pages', content_rowid='id',
                                     tokenize='porter unicode61');
"""


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.text: list[str] = []
        self.url: str | None = None
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag in ("script", "style", "noscript", "template"):
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "link" and a.get("rel", "").lower() == "canonical" and a.get("href"):
            self.url = self.url or a["href"]
        elif tag == "meta" and a.get("property", "").lower() == "og:url" and a.get("content"):
            self.url = self.url or a["content"]
        elif tag in ("p", "br", "div", "li", "h1", "h2", "h3", "h4", "tr", "section", "article"):
            self.text.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript", "template") and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            self.text.append(data)


def _tidy(text: str) -> str:
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _from_html(raw: str) -> tuple[str | None, str, str]:
    parser = _Html()
    parser.feed(raw)
    parser.close()
    return parser.url, _tidy("".join(parser.title)), _tidy("".join(parser.text))


def _from_text(raw: str) -> tuple[str | None, str, str]:
    url = title = None
    if raw.startswith("---\n"):
        end = raw.find("\n---", 4)
        if end > 0:
            for line in raw[4:end].splitlines():
                key, _, value = line.partition(":")
                if key.strip().lower() == "url":
                    url = value.strip().strip("'\"") or None
                elif key.strip().lower() == "title":
                    title = value.strip().strip("'\"") or None
            raw = raw[end + 4:]
    body = raw.strip()
    if title is None:
        first = next((line for line in body.splitlines() if line.strip()), "")
        title = first.lstrip("#").strip()[:200]
    return url, title, body


def _jsonl(path: Path) -> Iterator[tuple[str, str, str]]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                log.warning("web search index: %s line %d is not JSON; skipped", path, n)
                continue
            text = doc.get("text") or doc.get("content") or doc.get("body") if isinstance(doc, dict) else None
            if not isinstance(text, str) or not isinstance(doc.get("url"), str):
                log.warning("web search index: %s line %d has no url and text; skipped", path, n)
                continue
            yield doc["url"], str(doc.get("title") or doc["url"]), text


def documents(source: Path) -> Iterator[tuple[str, str, str]]:
    """``(url, title, text)`` of every document under ``source`` (see the module docstring)."""
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            yield from _jsonl(path)
            continue
        if suffix not in (".html", ".htm", ".md", ".txt"):
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")[:_MAX_DOC_CHARS]
        url, title, text = _from_html(raw) if suffix in (".html", ".htm") else _from_text(raw)
        rel = path.name if source.is_file() else path.relative_to(source).as_posix()
        yield url or f"offline:/{rel}", html.unescape(title) or rel, text


def fingerprint(source: Path) -> str:
    digest = hashlib.sha256(str(source.resolve()).encode())
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        st = path.stat()
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def build(source: Path, target: Path) -> int:
    """Index ``source`` into ``target`` (replaced atomically); the number of documents."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".sqlite3", dir=target.parent)
    os.close(fd)
    count = 0
    try:
        db = sqlite3.connect(tmp)
        try:
            db.executescript(_SCHEMA)
            for url, title, text in documents(source):
                cur = db.execute("INSERT OR REPLACE INTO pages(url, title, body) VALUES (?, ?, ?)",
                                 (url, title, text))
                count += cur.rowcount
            db.execute("INSERT INTO docs(docs) VALUES ('rebuild')")
            db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (fingerprint(source),))
            db.commit()
        finally:
            db.close()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def _current(source: Path, target: Path) -> bool:
    if not target.exists():
        return False
    try:
        db = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False
    return row is not None and row[0] == fingerprint(source)


def match_expression(query: str) -> str | None:
    """The FTS5 query for free text: its words, each quoted, any of them (BM25 ranks); a
    camel-case word counts its parts too (``OpenResponses`` finds "Open Responses")."""
    found: list[str] = []
    for word in _WORD.findall(query):
        found.append(word.lower())
        parts = _CAMEL.findall(word)
        if len(parts) > 1:
            found += [p.lower() for p in parts]
    words = list(dict.fromkeys(found))[:_MAX_QUERY_WORDS]
    return " OR ".join(f'"{w}"' for w in words) or None


class OfflineIndex:
    """A :class:`~app.tools.search.SearchProvider` over a built index file (read-only)."""

    external = False

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self.size = self._db.execute("SELECT count(*) FROM pages").fetchone()[0]

    @classmethod
    async def open(cls, source: Path, index: Path | None = None) -> OfflineIndex:
        """The index of ``source``, built first when missing or out of date."""
        def ready() -> OfflineIndex:
            key = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
            target = index or Path(tempfile.gettempdir()) / f"ocm-web-index-{key}.sqlite3"
            if not source.exists():
                raise FileNotFoundError(f"[tools.web_search] documents: {source} does not exist")
            if not _current(source, target):
                n = build(source, target)
                log.info("web search index: %d documents from %s into %s", n, source, target)
            return cls(target)

        return await asyncio.to_thread(ready)

    def _search(self, expression: str, limit: int, domains: Sequence[str]) -> list[Hit]:
        fetch = limit if not domains else min(limit * 20, 500)
        with self._lock:
            rows = self._db.execute(
                "SELECT pages.url, pages.title, snippet(docs, 1, '', '', ' … ', 40) FROM docs "
                "JOIN pages ON pages.id = docs.rowid WHERE docs MATCH ? "
                "ORDER BY bm25(docs, 4.0, 1.0) LIMIT ?", (expression, fetch)).fetchall()
        hits = [Hit(url, title, _tidy(snippet)) for url, title, snippet in rows if in_domains(url, domains)]
        return hits[:limit]

    async def search(self, query: str, *, limit: int, domains: Sequence[str] = ()) -> list[Hit]:
        expression = match_expression(query)
        if expression is None or limit <= 0:
            return []
        return await asyncio.to_thread(self._search, expression, limit, domains)

    def _page(self, url: str) -> Page | None:
        with self._lock:
            row = self._db.execute("SELECT url, title, body FROM pages WHERE url = ?", (url,)).fetchone()
        return Page(*row) if row is not None else None

    async def page(self, url: str) -> Page | None:
        return await asyncio.to_thread(self._page, url)

    def close(self) -> None:
        self._db.close()


async def open_search(settings: ToolSettings) -> SearchProvider | None:
    """The configured web search provider: the offline index of ``documents``, an MCP server
    (``mcp_server``) or a SearXNG instance (``searxng_url``); None when none is set."""
    web = settings.web_search
    if sum(bool(x) for x in (web.documents, web.mcp_server, web.searxng_url)) > 1:
        raise ValueError("[tools.web_search]: set one of documents, mcp_server and searxng_url")
    if web.searxng_url:
        from app.tools.search_searxng import SearxngSearch

        return SearxngSearch(web.searxng_url, categories=web.searxng_categories,
                             language=web.searxng_language, timeout=web.searxng_timeout)
    if web.documents:
        return await OfflineIndex.open(Path(web.documents), Path(web.index) if web.index else None)
    if web.mcp_server:
        configured = settings.mcp.servers.get(web.mcp_server)
        if configured is None:
            raise ValueError(f"[tools.web_search] mcp_server = {web.mcp_server!r} names no "
                             "[tools.mcp.servers] entry")
        from app.tools.mcp import McpServer
        from app.tools.search_mcp import McpSearch

        server = McpServer(web.mcp_server, configured.url, dict(configured.headers))
        return McpSearch(server, web.mcp_search_tool, web.mcp_open_tool, external=web.mcp_external,
                         connect_timeout=settings.connect_timeout, call_timeout=settings.call_timeout,
                         max_output_chars=settings.max_output_chars)
    return None
