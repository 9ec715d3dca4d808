"""The knowledge facade (:class:`Knowledge`): vector stores as the API and the ``file_search``
tool use them — the catalog (:mod:`.catalog`), the chunk index, the embedder and the file store
behind one object that checks ownership and input and keeps them in step.

* **Ownership.** Every call names an owner.  Another owner's vector store, vector-store file,
  batch or File (``file_ids`` given to a create included) is :class:`~app.core.errors.NotFound`
  with the very message of a missing one.
* **Writes** go to the catalog first, then the index: deleting a store drops its chunks,
  removing a file from a store removes the file's chunks, new attributes re-tag them.
  Deleting the File itself (``DELETE /v1/files/{id}``) leaves its vector-store files and
  their chunks, as OpenAI does, until they are removed from the store.
* **Adding files** validates them (each File the owner's), the ``chunking_strategy``
  (:func:`app.knowledge.chunking.strategy`, capped for the embedder) and ``attributes``, makes
  the rows and their jobs, and wakes the ingestion (:mod:`.ingest`, started by :meth:`start`).
* **Search** (:meth:`Knowledge.search`, the API's and the tool's): the stores checked (the
  owner's, not expired, embedded with the configured model: else 409
  ``embedding_model_changed``), ``filters`` and ``ranking_options`` validated (400 naming the
  parameter), each query embedded (no embedder, a store without vectors yet, or an embedder
  that fails: keyword ranking only), ranked by the index across all the stores, queries merged
  (a chunk found twice keeps its best score), best first.  The stores' ``last_active_at``
  moves (which pushes ``expires_at`` back).  ``rewrite_query`` has no model here: the query is
  searched as given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.core.errors import GatewayError, InvalidRequest, NotFound
from app.knowledge import chunking, filters, ranking
from app.knowledge.catalog import (
    BatchRecord,
    FileRecord,
    NewEntry,
    NewStore,
    Page,
    StoreChanges,
    StoreRecord,
    VectorStoreCatalog,
    check_attributes,
)
from app.knowledge.embed import check_space
from app.knowledge.files import FileStore
from app.knowledge.vectors import (
    ChunkIndex,
    Embedder,
    EmbeddingSpace,
    Hit,
    Query,
    new_batch_id,
)

if TYPE_CHECKING:
    from app.config import GatewayConfig
    from app.stores import Stores

log = logging.getLogger("ocm_gateway")


def store_missing(store_id: str, param: str = "vector_store_id") -> NotFound:
    return NotFound(f"No vector store found with id '{store_id[:80]}'.", param=param)


def file_missing(file_id: str, param: str) -> NotFound:
    return NotFound(f"No such File object: {file_id[:80]}", param=param)


def cut(found: list[Any], page: Page) -> tuple[list[Any], bool]:
    """A page fetched ``limit + 1`` long: its items and whether there are more."""
    more = len(found) > page.limit
    if not more:
        return found, False
    return (found[1:], True) if page.before is not None and page.after is None else (found[:-1], True)


class Knowledge:
    """The facade (see the module docstring).  ``embedder`` may be ``None`` (none configured:
    keyword-only chunks and ranking); ``index`` too (PostgreSQL without pgvector:
    ``index_error`` says so — ingestion fails files with it as ``server_error``, search is that
    503; the rest of the gateway runs)."""

    def __init__(self, catalog: VectorStoreCatalog, files: FileStore, index: ChunkIndex | None,
                 embedder: Embedder | None, *, concurrency: int = 1, poll_seconds: float = 1.0,
                 lease_seconds: float = 300.0, sweep_seconds: float = 60.0) -> None:
        self.catalog, self.files, self.index, self.embedder = catalog, files, index, embedder
        self.concurrency, self.poll_seconds = concurrency, poll_seconds
        self.lease_seconds, self.sweep_seconds = lease_seconds, sweep_seconds
        self.wake: Callable[[], None] = lambda: None  # the ingestion's, once started
        self.index_error: GatewayError | None = None  # why there is no index (pgvector missing)
        self._tasks: list[asyncio.Task[None]] = []

    # --- the background work ---------------------------------------------------------------

    def start(self) -> None:
        """Start the ingestion workers and the expiry sweep (in the running loop)."""
        from app.knowledge.ingest import Ingestor, expire_forever

        ingestor = Ingestor(self)
        self.wake = ingestor.wake
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(ingestor.run()), loop.create_task(expire_forever(self))]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):  # stopping, whatever it was
                await task
        self._tasks = []

    # --- helpers -----------------------------------------------------------------------------

    @property
    def space(self) -> EmbeddingSpace | None:
        found = self.embedder
        return None if found is None else EmbeddingSpace(found.model, found.dimensions)

    def chunking(self, given: Mapping[str, Any] | None, param: str = "chunking_strategy") -> Any:
        limit = self.embedder.max_input_tokens if self.embedder is not None else None
        return chunking.strategy(given, limit, param=param)

    async def _store(self, owner: str, store_id: str, param: str = "vector_store_id",
                     writable: bool = False) -> StoreRecord:
        found = await self.catalog.get_store(owner, store_id)
        if found is None:
            raise store_missing(store_id, param)
        if writable and found.expired:
            raise InvalidRequest(f"Vector store {store_id} has expired; files cannot be added to it.",
                                 param=param, code="vector_store_expired")
        if writable and self.space is not None:
            check_space(store_id, found.space, self.space)
        return found

    async def _entries(self, owner: str, specs: Sequence[tuple[Any, Any, Any]], param: str,
                       ) -> list[NewEntry]:
        """``(file_id, attributes, chunking_strategy)`` each checked; one entry per file."""
        entries: dict[str, NewEntry] = {}
        for i, (file_id, attributes, strategy) in enumerate(specs):
            at = {"file_ids": (f"file_ids[{i}]", ""), "files": (f"files[{i}].file_id", f"files[{i}]."),
                  "file_id": ("file_id", "")}[param]
            if not isinstance(file_id, str) or not file_id:
                raise InvalidRequest(f"Invalid '{at[0]}': a file id is expected.", param=at[0],
                                     code="invalid_value")
            attrs = check_attributes(attributes, f"{at[1]}attributes")
            plan = self.chunking(strategy, f"{at[1]}chunking_strategy")
            meta = await self.files.get(file_id, owner)
            if meta is None:
                raise file_missing(file_id, at[0])
            entries[file_id] = NewEntry(file_id, meta.filename, plan, attrs)
        return list(entries.values())

    # --- vector stores -----------------------------------------------------------------------

    async def create_store(self, owner: str, *, name: str | None = None,
                           metadata: Mapping[str, str] | None = None, expires_after_days: int | None = None,
                           file_ids: Sequence[str] = (), chunking_strategy: Mapping[str, Any] | None = None,
                           description: str | None = None) -> StoreRecord:
        plan = self.chunking(chunking_strategy)
        entries = await self._entries(owner, [(f, None, None) for f in file_ids], "file_ids")
        entries = [NewEntry(e.file_id, e.filename, plan) for e in entries]
        made = await self.catalog.create_store(
            NewStore(owner, name or "", metadata, expires_after_days, description, self.space),
            entries, int(time.time()))
        if entries:
            self.wake()
        return made

    async def get_store(self, owner: str, store_id: str) -> StoreRecord:
        return await self._store(owner, store_id)

    async def page_stores(self, owner: str, page: Page) -> tuple[list[StoreRecord], bool]:
        found = await self.catalog.page_stores(owner, Page(page.limit + 1, page.after, page.before,
                                                           page.ascending))
        if found is None:
            raise store_missing(str(page.after or page.before), "after" if page.after else "before")
        return cut(found, page)

    async def update_store(self, owner: str, store_id: str, changes: StoreChanges) -> StoreRecord:
        found = await self.catalog.update_store(owner, store_id, changes, int(time.time()))
        if found is None:
            raise store_missing(store_id)
        return found

    async def delete_store(self, owner: str, store_id: str) -> None:
        if not await self.catalog.delete_store(owner, store_id):
            raise store_missing(store_id)
        if self.index is not None:
            await self.index.drop_store(store_id)

    # --- vector-store files ------------------------------------------------------------------

    async def add_file(self, owner: str, store_id: str, file_id: str, *, attributes: Any = None,
                       chunking_strategy: Mapping[str, Any] | None = None) -> FileRecord:
        await self._store(owner, store_id, writable=True)
        entries = await self._entries(owner, [(file_id, attributes, chunking_strategy)], "file_id")
        added = await self.catalog.add_files(owner, store_id, entries, int(time.time()))
        if not added:
            raise store_missing(store_id)
        self.wake()
        return added[0]

    async def get_file(self, owner: str, store_id: str, file_id: str) -> FileRecord:
        await self._store(owner, store_id)
        found = await self.catalog.get_file(owner, store_id, file_id)
        if found is None:
            raise NotFound(f"No file found with id '{file_id[:80]}' in vector store '{store_id[:80]}'.",
                           param="file_id")
        return found

    async def page_files(self, owner: str, store_id: str, page: Page, *, status: str | None = None,
                         batch_id: str | None = None) -> tuple[list[FileRecord], bool]:
        await self._store(owner, store_id)
        if batch_id is not None:
            await self.get_batch(owner, store_id, batch_id)
        found = await self.catalog.page_files(owner, store_id, Page(page.limit + 1, page.after, page.before,
                                                                    page.ascending),
                                              status=status, batch_id=batch_id)
        if found is None:
            raise NotFound(f"No file found with id '{str(page.after or page.before)[:80]}' in vector store "
                           f"'{store_id[:80]}'.", param="after" if page.after else "before")
        return cut(found, page)

    async def update_file(self, owner: str, store_id: str, file_id: str, attributes: Any) -> FileRecord:
        attrs = check_attributes(attributes)
        await self.get_file(owner, store_id, file_id)
        found = await self.catalog.set_attributes(owner, store_id, file_id, attrs)
        if found is None:
            raise NotFound(f"No file found with id '{file_id[:80]}' in vector store '{store_id[:80]}'.",
                           param="file_id")
        if self.index is not None:
            await self.index.set_attributes(store_id, file_id, attrs)
        return found

    async def remove_file(self, owner: str, store_id: str, file_id: str) -> None:
        await self._store(owner, store_id)
        if not await self.catalog.remove_file(owner, store_id, file_id):
            raise NotFound(f"No file found with id '{file_id[:80]}' in vector store '{store_id[:80]}'.",
                           param="file_id")
        if self.index is not None:
            await self.index.remove_file(store_id, file_id)

    async def file_content(self, owner: str, store_id: str, file_id: str) -> tuple[FileRecord, list[str]]:
        found = await self.get_file(owner, store_id, file_id)
        texts = await self.index.chunks(store_id, file_id) if self.index is not None else []
        return found, texts

    # --- file batches ------------------------------------------------------------------------

    async def create_batch(self, owner: str, store_id: str, *, file_ids: Sequence[str] | None = None,
                           files: Sequence[Mapping[str, Any]] | None = None, attributes: Any = None,
                           chunking_strategy: Mapping[str, Any] | None = None) -> BatchRecord:
        await self._store(owner, store_id, writable=True)
        if (file_ids is None) == (files is None):
            raise InvalidRequest("Give either 'file_ids' or 'files' (one of them, not both).",
                                 param="file_ids", code="invalid_value")
        if file_ids is not None:
            entries = await self._entries(owner, [(f, attributes, chunking_strategy) for f in file_ids],
                                          "file_ids")
        else:
            entries = await self._entries(owner, [(f.get("file_id"), f.get("attributes"),
                                                   f.get("chunking_strategy")) for f in files or ()], "files")
        batch_id = new_batch_id()
        if await self.catalog.add_files(owner, store_id, entries, int(time.time()), batch_id) is None:
            raise store_missing(store_id)
        self.wake()
        return await self.get_batch(owner, store_id, batch_id)

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord:
        found = await self.catalog.get_batch(owner, store_id, batch_id)
        if found is None:
            await self._store(owner, store_id)
            raise NotFound(f"No file batch found with id '{batch_id[:80]}' in vector store "
                           f"'{store_id[:80]}'.", param="batch_id")
        return found

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> BatchRecord:
        await self.get_batch(owner, store_id, batch_id)
        found = await self.catalog.cancel_batch(owner, store_id, batch_id)
        assert found is not None
        return found

    # --- search ------------------------------------------------------------------------------

    async def _searchable(self, owner: str, vector_store_ids: Sequence[str], flt: Any, options: Any,
                          ) -> tuple[list[StoreRecord], dict[str, Any] | None, ranking.RankingOptions]:
        parsed = filters.parse(flt) if flt is not None else None
        opts = ranking.parse_ranking_options(options)
        stores = []
        for i, store_id in enumerate(vector_store_ids):
            store = await self._store(owner, store_id, "vector_store_id" if len(vector_store_ids) == 1
                                      else f"vector_store_ids[{i}]")
            if store.expired:
                raise InvalidRequest(f"Vector store {store_id} has expired.", param="vector_store_id",
                                     code="vector_store_expired")
            if self.space is not None:
                check_space(store_id, store.space, self.space)
            stores.append(store)
        return stores, parsed, opts

    async def check_search(self, owner: str, vector_store_ids: Sequence[str], *,
                           filters: Mapping[str, Any] | None,
                           ranking_options: Mapping[str, Any] | None) -> None:
        """What :meth:`search` would refuse, without searching (the Responses API plans with it)."""
        await self._searchable(owner, vector_store_ids, filters, ranking_options)

    async def _vector(self, text: str, stores: Sequence[StoreRecord]) -> list[float] | None:
        if self.embedder is None or all(s.space is None for s in stores):
            return None
        try:
            return (await self.embedder.embed([text]))[0]
        except GatewayError as exc:  # ranked by keywords rather than not at all
            log.warning("file search: the query's embedding failed (%s); keyword ranking only", exc.message)
            return None

    async def search(self, owner: str, vector_store_ids: Sequence[str], query: str | Sequence[str], *,
                     max_num_results: int = 10, filters: Mapping[str, Any] | None = None,
                     ranking_options: Mapping[str, Any] | None = None) -> list[Hit]:
        """Ranked hits over the owner's stores (see the module docstring)."""
        stores, parsed, opts = await self._searchable(owner, vector_store_ids, filters, ranking_options)
        if not 1 <= max_num_results <= 50:
            raise InvalidRequest("Invalid 'max_num_results': from 1 to 50.", param="max_num_results",
                                 code="invalid_value")
        await self.catalog.touch(owner, [s.id for s in stores], int(time.time()))
        if self.index is None:
            if self.index_error is not None:
                raise self.index_error
            return []
        best: dict[tuple[str, str, int], Hit] = {}
        for text in [query] if isinstance(query, str) else list(query):
            vector = await self._vector(text, stores)
            found = await self.index.search(Query(
                owner, [s.id for s in stores], text, vector, max_num_results, parsed, opts.ranker,
                opts.score_threshold, opts.embedding_weight, opts.text_weight))
            for hit in found:
                key = (hit.vector_store_id, hit.file_id, hit.chunk_index)
                if key not in best or hit.score > best[key].score:
                    best[key] = hit
        ranked = sorted(best.values(), key=lambda h: -h.score)
        return ranked[:max_num_results]


async def open_knowledge(stores: Stores, config: GatewayConfig,
                         backend_of: Callable[[str], object]) -> Knowledge:
    """The facade on the application's stores: the catalog and the index beside the other
    tables (SQLite, or PostgreSQL with ``[store] url``), the embedder of ``[knowledge]
    embedding_model`` (``backend_of(model)``: that model's backend), if any."""
    from app.knowledge.embed import embedder_for
    from app.knowledge.postgres_index import PgvectorMissing
    from app.knowledge.sqlite_catalog import SqliteCatalog
    from app.knowledge.sqlite_index import SqliteChunkIndex

    assert stores.files is not None
    settings = getattr(config, "knowledge", None)
    model = getattr(settings, "embedding_model", None)
    embedder = embedder_for(config, backend_of(model)) if model else None
    catalog: VectorStoreCatalog
    index: ChunkIndex | None = None
    missing: GatewayError | None = None
    if stores.pool is None:
        catalog = await SqliteCatalog.create(stores.local)
        index = await SqliteChunkIndex.create(stores.local)
    else:
        from app.knowledge.postgres_catalog import PostgresCatalog
        from app.knowledge.postgres_index import PostgresChunkIndex

        catalog = PostgresCatalog(stores.pool)
        try:
            index = await PostgresChunkIndex.create(stores.pool)
        except PgvectorMissing as exc:  # the gateway runs; vector stores say why they cannot
            log.error("vector stores: %s", exc.message)
            missing = exc
    knowledge = Knowledge(catalog, stores.files, index, embedder,
                     concurrency=getattr(settings, "ingest_concurrency", 1),
                     poll_seconds=getattr(settings, "ingest_poll_seconds", 1.0),
                     lease_seconds=getattr(settings, "ingest_lease_seconds", 300.0),
                     sweep_seconds=getattr(config.files, "sweep_seconds", 60.0))
    knowledge.index_error = missing
    return knowledge

