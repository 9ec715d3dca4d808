"""The ``file_search`` hosted tool: the caller's vector stores searched by the model.

What the model is shown: one function, ``msearch(queries)`` in namespace ``file_search``
(model-facing name ``file_search__msearch``, which no client function can take: the Responses
API refuses a function of that name beside the hosted tool).  On Harmony it is a built-in in
the system message (``## file_search`` / ``namespace file_search {...}``), called as
``to=file_search.msearch`` the way gpt-oss calls ``browser.search``; on chat templates and
OpenChatML it is a plain function.  Its arguments are ``{"queries": [...]}`` (at most
:data:`MAX_QUERIES`; ``{"query": "..."}`` is read as one query).

Each call searches every vector store of the tool (``vector_store_ids``) for every query
through :class:`VectorSearch` (the knowledge facade: ranking across stores is its job), merges
the queries' hits (a chunk found twice keeps its best score), keeps the best
``max_num_results`` and shows them as one **display**::

    [2] File search results for `refund policy`
    # 【0†handbook.pdf†file-abc】
    ...the chunk's text, as the document has it...

    # 【1†faq.md†file-def】
    ...

The number in brackets is the display's **index** (displays are numbered across the
conversation: a new response goes on after the ``file_search_call`` items of its context); the
model cites result ``k`` of display ``n`` as ``【n:k†filename】`` (the description it is shown
says so).  :meth:`FileSearchToolbox.citations` turns each citation of a result shown in this
response or in an earlier one of the context (:func:`shown_results`: the results an item
keeps, else the result headers of what the model read, its ``ocm:output``) into a
``file_citation`` annotation ``{type, file_id, filename, index}`` whose ``index`` is where the
citation starts in the answer: the answer's text is never changed, so a client that strips the
markers inserts its footnote at ``index``.

Chunk text is document text: it reaches the model as a tool output, which every prompt format
renders as plain text (a chunk containing ``<|end|>`` or ``</tool_call>`` cannot end a turn).
A chunk line that looks like a result header (``# 【``) is shown with a zero-width space after
the ``#``, so a document cannot forge a result that a later turn's citation would resolve to.
Failures are the call's, never the response's: a vector store the owner does not have (missing
or another key's: the facade answers both alike), a store that cannot answer, all become the
outcome's ``error`` text.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from app.core.conversation import FunctionTool
from app.core.errors import GatewayError, NotFound
from app.knowledge.vectors import Hit
from app.tools.base import ToolOutcome, clip

NAMESPACE = "file_search"
MSEARCH = f"{NAMESPACE}__msearch"
MAX_QUERIES = 5
MAX_QUERY_CHARS = 4096
DEFAULT_RESULTS = 10  # OpenAI's default max_num_results
MAX_RESULTS = 50
MAX_STORES = 16  # vector stores one file_search tool searches
DESCRIPTION = (
    "Searches the files the user provided (their vector stores) and shows the passages found.\n"
    "Give one to five queries; one of them should be the user's question itself, the others "
    "rewrites of it for different facts.\n"
    "Each result display starts with its index in brackets: `[{display}]`, and each passage with "
    "`# 【{result}†{filename}†{file_id}】`.\n"
    "Cite the passages you use as `【{display}:{result}†{filename}】`, e.g. `【3:1†handbook.pdf】` "
    "for result 1 of display 3.")
FUNCTIONS = (
    FunctionTool(MSEARCH, DESCRIPTION,
                 {"type": "object", "properties": {
                     "queries": {"type": "array", "items": {"type": "string"},
                                 "description": "The search queries (one to five)."}},
                  "required": ["queries"]}, False, NAMESPACE, NAMESPACE),
)
_CITATION = re.compile(r"【(\d{1,9}):(\d{1,4})†[^†】\n]{0,400}(?:†[^†】\n]{0,400})?】")
_HEADER = re.compile(r"^\[(\d{1,9})\] File search results")
_RESULT = re.compile(r"^# 【(\d{1,4})†([^†】\n]*)†([^†】\n]*)】$", re.MULTILINE)
_FORGED = re.compile(r"^# 【", re.MULTILINE)
_DEFUSED = "#\u200b 【"
Shown = tuple[str, str]  # a result as a citation names it: (file_id, filename)


class VectorSearch(Protocol):
    """What the tool needs of the knowledge facade (``app.knowledge.service.Knowledge``):
    ranked hits over several of ``owner``'s vector stores.  A store the owner does not have
    (missing, or another owner's) raises :class:`~app.core.errors.NotFound`, the same for both;
    a malformed ``filters`` / ``ranking_options`` raises ``InvalidRequest``; a store that cannot
    answer raises another :class:`~app.core.errors.GatewayError`."""

    async def search(self, owner: str, vector_store_ids: Sequence[str], query: str, *,
                     max_num_results: int, filters: Mapping[str, Any] | None,
                     ranking_options: Mapping[str, Any] | None) -> list[Hit]: ...


@runtime_checkable
class SearchCheck(Protocol):
    """Optional: a facade that can check a ``file_search`` tool when the request is planned
    (the stores are the owner's, the filters and ranking options are valid) without searching;
    the Responses API then answers a bad tool with a 404 / 400 before any output."""

    async def check_search(self, owner: str, vector_store_ids: Sequence[str], *,
                           filters: Mapping[str, Any] | None,
                           ranking_options: Mapping[str, Any] | None) -> None: ...


def _plain(text: str) -> str:
    """A filename inside a result header: without the characters that delimit headers."""
    return re.sub(r"[【】†\n\r]", " ", text).strip() or "(unnamed)"


def queries_of(arguments: str) -> list[str]:
    """The model's queries (``queries``, or a single ``query``), stripped, deduplicated, at
    most :data:`MAX_QUERIES`; [] when the arguments give none."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return []
    if not isinstance(args, dict):
        return []
    raw = args.get("queries", args.get("query"))
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    found = [q.strip()[:MAX_QUERY_CHARS] for q in values if isinstance(q, str) and q.strip()]
    return list(dict.fromkeys(found))[:MAX_QUERIES]


def result_of(hit: Hit) -> dict[str, Any]:
    """A hit as a ``file_search_call`` result."""
    return {"file_id": hit.file_id, "filename": hit.filename, "score": round(float(hit.score), 6),
            "text": hit.text, "attributes": dict(hit.attributes)}


def merge(found: Iterable[Sequence[Hit]], limit: int) -> list[Hit]:
    """The hits of several queries as one ranking: a chunk found more than once keeps its best
    score; best first (ties: the order found), at most ``limit``."""
    best: dict[tuple[str, str, int], tuple[float, int, Hit]] = {}
    order = 0
    for hits in found:
        for hit in hits:
            key = (hit.vector_store_id, hit.file_id, hit.chunk_index)
            if key not in best or hit.score > best[key][0]:
                best[key] = (hit.score, best[key][1] if key in best else order, hit)
            order += 1
    ranked = sorted(best.values(), key=lambda entry: (-entry[0], entry[1]))
    return [hit for _, _, hit in ranked[:limit]]


def display(index: int, queries: Sequence[str], hits: Sequence[Hit]) -> str:
    """What the model reads of one call (see the module docstring)."""
    head = f"[{index}] File search results for " + ", ".join(f"`{q}`" for q in queries)
    if not hits:
        return head + "\n\nNo results."
    body = [f"# 【{k}†{_plain(hit.filename)}†{_plain(hit.file_id)}】\n{_FORGED.sub(_DEFUSED, hit.text)}"
            for k, hit in enumerate(hits)]
    return head + "\n" + "\n\n".join(body)


def earlier_displays(items: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """The earlier ``file_search_call`` items by display index (their ``ocm:output`` starts
    ``[n] File search results``); only that first line is read here, the results when an
    answer cites one (:func:`shown_results`)."""
    out: dict[int, Mapping[str, Any]] = {}
    for item in items:
        kept = item.get("ocm:output") if item.get("type") == "file_search_call" else None
        found = _HEADER.match(kept) if isinstance(kept, str) else None
        if found is not None:
            out[int(found.group(1))] = item
    return out


def shown_results(item: Mapping[str, Any]) -> list[Shown]:
    """An earlier display's results as ``(file_id, filename)``: the item's ``results`` when it
    kept them, else the result headers of what the model read."""
    results = item.get("results")
    if isinstance(results, list) and results:
        return [(str(r.get("file_id") or ""), str(r.get("filename") or ""))
                for r in results if isinstance(r, Mapping)]
    kept = item.get("ocm:output")
    shown = {int(m.group(1)): (m.group(3), m.group(2)) for m in _RESULT.finditer(str(kept or ""))}
    return [shown[k] for k in range(len(shown)) if k in shown]


@dataclass
class FileSearchToolbox:
    """``file_search`` for one response (a :class:`~app.tools.base.Toolbox`)."""

    knowledge: VectorSearch
    owner: str
    vector_store_ids: tuple[str, ...]
    max_num_results: int = DEFAULT_RESULTS
    filters: Mapping[str, Any] | None = None
    ranking_options: Mapping[str, Any] | None = None
    max_output_chars: int = 32_768
    earlier: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # earlier_displays(context)
    functions: tuple[FunctionTool, ...] = FUNCTIONS
    displays: list[list[Hit]] = field(default_factory=list)  # this response's, in order
    _read: dict[int, list[Shown]] = field(default_factory=dict)  # earlier displays' results, once read

    @property
    def first(self) -> int:
        """The index of this response's first display: after every earlier one."""
        return max(self.earlier, default=-1) + 1

    def owns(self, name: str) -> bool:
        return name == MSEARCH

    def needs_approval(self, name: str) -> bool:
        return False

    async def _search(self, query: str) -> list[Hit]:
        return await self.knowledge.search(self.owner, self.vector_store_ids, query,
                                           max_num_results=self.max_num_results, filters=self.filters,
                                           ranking_options=self.ranking_options)

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        queries = queries_of(arguments)
        detail: dict[str, Any] = {"queries": queries}
        if not queries:
            return ToolOutcome("", 'msearch needs {"queries": ["..."]}: one to five non-empty queries.',
                               detail)
        answers = await asyncio.gather(*(self._search(q) for q in queries), return_exceptions=True)
        found: list[list[Hit]] = []
        for answer in answers:
            if isinstance(answer, NotFound):  # a store missing or another key's: said alike
                return ToolOutcome("", answer.message, detail)
            if isinstance(answer, GatewayError):  # the store or the embedding model failed
                return ToolOutcome("", f"File search is unavailable: {answer.message}", detail)
            if isinstance(answer, BaseException):
                raise answer
            found.append(answer)
        hits = merge(found, self.max_num_results)
        index = self.first + len(self.displays)
        self.displays.append(hits)
        detail["results"] = [result_of(hit) for hit in hits]
        return ToolOutcome(clip(display(index, queries, hits), self.max_output_chars), None, detail)

    def _result(self, n: int, k: int) -> Shown | None:
        if n >= self.first:
            hits = self.displays[n - self.first] if n - self.first < len(self.displays) else []
            return (hits[k].file_id, hits[k].filename) if k < len(hits) else None
        if n not in self._read:
            self._read[n] = shown_results(self.earlier[n]) if n in self.earlier else []
        shown = self._read[n]
        return shown[k] if k < len(shown) else None

    def citations(self, text: str) -> list[dict[str, Any]]:
        """``file_citation`` annotations for the answer's ``【n:k†…】`` citations of a result
        shown in this response or an earlier one (a citation of anything else is left alone)."""
        out: list[dict[str, Any]] = []
        for m in _CITATION.finditer(text):
            found = self._result(int(m.group(1)), int(m.group(2)))
            if found is not None and found[0]:
                out.append({"type": "file_citation", "file_id": found[0], "filename": found[1],
                            "index": m.start()})
        return out

    async def aclose(self) -> None:
        return None
