"""Ingestion: the background work that turns a vector-store file into indexed chunks.

:class:`Ingestor` runs ``concurrency`` workers in the gateway's event loop (started by
:meth:`app.knowledge.service.Knowledge.start` from the application's lifespan).  Each worker:

1. **claims** a job from the catalog (:meth:`~app.knowledge.catalog.VectorStoreCatalog.claim`:
   one worker of one replica per job, under a lease; SQLite: the processes of one machine,
   PostgreSQL: ``FOR UPDATE SKIP LOCKED``) — woken at once when this process adds files, else every
   ``poll_seconds`` (jobs other replicas added, leases that ran out);
2. keeps the lease **renewed** every third of it while it works; a renewal refused (the file
   removed, its batch cancelled, its store deleted or expired, the job taken over) stops the
   work: its chunks, if already added, are removed unless the file is being ingested again;
3. **reads** the File (at most :data:`MAX_FILE_BYTES`) and, in the ingestion's own threads
   (never the event loop's; PDF in the file worker process), **extracts** its text
   (:mod:`.extract`) and **chunks** it (:mod:`.chunking`);
4. **embeds** the chunks (:data:`EMBED_GROUP` at a time; no embedder: keyword-only chunks
   without vectors) and **indexes** them (``ChunkIndex.add`` replaces the file's chunks);
5. **finishes** the job — ``completed`` with ``usage_bytes`` (the chunks' UTF-8 text plus 4
   bytes per vector value), or ``failed`` with OpenAI's ``last_error``: ``unsupported_file`` /
   ``invalid_file`` from extraction, ``server_error`` otherwise.  A transient failure (the
   embedding model unreachable or overloaded, the store busy) gives the job back for a later
   try, up to :data:`~app.knowledge.catalog.MAX_ATTEMPTS` claims.

A job interrupted by a shutdown is given back (:meth:`release`); one whose process died is
claimed again when its lease runs out (SQLite: at once when the gateway starts again).  :func:`expire_forever`
marks the stores past ``expires_at`` expired and drops their chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from app.core.errors import GatewayError
from app.items.file_jobs import Budget, Cancelled
from app.knowledge import chunking, extract
from app.knowledge.catalog import MAX_ATTEMPTS, Job
from app.knowledge.embed import check_space, transient
from app.knowledge.files import FileTooLarge, read_all
from app.knowledge.vectors import Chunk, Chunking, EmbeddingModelChanged, EmbeddingSpace
from app.stores.postgres import StoreUnavailable
from app.stores.sqlite_db import StoreBusy

if TYPE_CHECKING:
    from app.knowledge.service import Knowledge

log = logging.getLogger("ocm_gateway")
MAX_FILE_BYTES = 64 * 1024 * 1024  # one File read for ingestion
EMBED_GROUP = 64  # chunks per embedder call (the embedder batches them further)
RETRY_SECONDS = 10.0  # a job given back after a transient failure waits this long


def prepare(data: bytes, filename: str, content_type: str, plan: Chunking, budget: Budget) -> list[str]:
    """Extract and chunk (blocking: in a thread)."""
    texts = chunking.chunk(extract.extract(data, filename, content_type, budget), plan)
    if not texts:
        raise extract.Unreadable("invalid_file", "The file has no text.")
    return texts


class _Retry(Exception):
    """A transient failure: the job is tried again later."""


class Ingestor:
    def __init__(self, knowledge: Knowledge) -> None:
        self.knowledge = knowledge
        self._wake = asyncio.Event()
        self._pool = ThreadPoolExecutor(max_workers=knowledge.concurrency, thread_name_prefix="ocm-ingest")

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        workers = [asyncio.create_task(self._worker()) for _ in range(self.knowledge.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _worker(self) -> None:
        k = self.knowledge
        while True:
            try:
                job = await k.catalog.claim(time.time(), k.lease_seconds)
            except (GatewayError, OSError) as exc:  # the store is down: later
                log.warning("ingestion: cannot claim a job (%s)", exc)
                job = None
            if job is None:
                with contextlib.suppress(TimeoutError):  # (not wait_for: on 3.11 a cancel that
                    async with asyncio.timeout(k.poll_seconds):  # meets a wake is lost)
                        await self._wake.wait()
                self._wake.clear()
                continue
            try:
                await self.work(job)
            except Exception as exc:  # the store failed mid-way: the lease runs out, the job is retaken
                log.warning("ingestion of %s: %s", job.file_id, exc)

    async def work(self, job: Job) -> None:
        """One claimed job, to its end (see the module docstring)."""
        budget = Budget(extract.PDF_SECONDS)
        task = asyncio.create_task(self._ingest(job, budget))
        lost = False
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=self.knowledge.lease_seconds / 3)
                if not done and not await self._renew(job):
                    lost = True
                    task.cancel()
            await task
        except asyncio.CancelledError:
            budget.cancelled.set()
            task.cancel()
            if not lost:  # shutting down: give it back for the next start (or another replica)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.knowledge.catalog.release(job))
                raise
            await self._stale(job)
        except Exception:
            log.exception("ingestion of %s into %s failed", job.file_id, job.vector_store_id)
            with contextlib.suppress(Exception):
                await self.knowledge.catalog.fail(job, "server_error", "The file could not be processed.")

    async def _renew(self, job: Job) -> bool:
        try:
            return await self.knowledge.catalog.renew(job, time.time(), self.knowledge.lease_seconds)
        except (GatewayError, OSError):
            return True  # the store is down: keep working; the finish will tell

    async def _stale(self, job: Job) -> None:
        """The job is no longer this worker's: remove its chunks unless the file is meant to
        have some (being ingested again, or completed by another worker)."""
        k = self.knowledge
        found = await k.catalog.get_file(job.owner, job.vector_store_id, job.file_id)
        if (found is None or found.status in ("cancelled", "failed")) and k.index is not None:
            await k.index.remove_file(job.vector_store_id, job.file_id)

    async def _ingest(self, job: Job, budget: Budget) -> None:
        k = self.knowledge
        try:
            texts = await self._texts(job, budget)
            vectors, space = await self._embed(job, texts)
            if k.index is None:
                raise extract.Unreadable("server_error", k.index_error.message if k.index_error is not None
                                         else "No chunk index is configured.")
            await k.index.add([Chunk(job.vector_store_id, job.file_id, i, text, vector, job.filename,
                                     dict(job.attributes)) for i, (text, vector) in
                               enumerate(zip(texts, vectors, strict=True))])
        except extract.Unreadable as exc:
            if not await k.catalog.fail(job, exc.code, exc.message):
                await self._stale(job)
            return
        except _Retry as exc:
            await self._later(job, str(exc))
            return
        except (StoreUnavailable, StoreBusy) as exc:
            await self._later(job, exc.message)
            return
        usage = sum(len(t.encode("utf-8")) + 4 * len(v) for t, v in zip(texts, vectors, strict=True))
        if not await k.catalog.finish(job, usage, space):
            await self._stale(job)
            return
        found = await k.catalog.get_file(job.owner, job.vector_store_id, job.file_id)
        if found is not None and dict(found.attributes) != dict(job.attributes) and k.index is not None:
            await k.index.set_attributes(job.vector_store_id, job.file_id, found.attributes)

    async def _later(self, job: Job, why: str) -> None:
        k = self.knowledge
        if job.attempts >= MAX_ATTEMPTS:
            if not await k.catalog.fail(job, "server_error", why):
                await self._stale(job)
            return
        log.warning("ingestion of %s: %s; trying again in %g s", job.file_id, why, RETRY_SECONDS)
        await k.catalog.renew(job, time.time() - k.lease_seconds + RETRY_SECONDS, k.lease_seconds)

    async def _texts(self, job: Job, budget: Budget) -> list[str]:
        try:
            read = await read_all(self.knowledge.files, job.file_id, job.owner, MAX_FILE_BYTES)
        except FileTooLarge:
            raise extract.Unreadable("unsupported_file", f"The file is larger than {MAX_FILE_BYTES:,} bytes, "
                                     "the most this gateway ingests.") from None
        except (StoreUnavailable, StoreBusy) as exc:
            raise _Retry(exc.message) from None
        if read is None:
            raise extract.Unreadable("invalid_file", "The file was deleted before it was processed.")
        meta, data = read
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, prepare, data, meta.filename, meta.content_type,
                                              job.chunking, budget)
        except Cancelled:
            raise asyncio.CancelledError from None

    async def _embed(self, job: Job, texts: list[str]) -> tuple[list[list[float]], EmbeddingSpace | None]:
        embedder = self.knowledge.embedder
        if embedder is None:
            return [[] for _ in texts], None
        try:
            check_space(job.vector_store_id, job.space, EmbeddingSpace(embedder.model, embedder.dimensions))
            vectors: list[list[float]] = []
            for start in range(0, len(texts), EMBED_GROUP):
                vectors += await embedder.embed(texts[start:start + EMBED_GROUP])
        except EmbeddingModelChanged as exc:
            raise extract.Unreadable("server_error", exc.message) from None
        except GatewayError as exc:
            if transient(exc):
                raise _Retry(f"the embedding model failed ({exc.message})") from None
            raise extract.Unreadable("server_error", f"The embedding model refused the file's chunks: "
                                     f"{exc.message}") from None
        return vectors, EmbeddingSpace(embedder.model, embedder.dimensions)


async def expire_forever(knowledge: Knowledge) -> None:
    """Run for the life of the process: every ``sweep_seconds``, expire the stores past their
    ``expires_at`` and drop their chunks."""
    while True:
        try:
            for store_id in await knowledge.catalog.expire(int(time.time())):
                if knowledge.index is not None:
                    await knowledge.index.drop_store(store_id)
                log.info("vector store %s expired", store_id)
        except Exception as exc:  # the store is down: next round
            log.warning("vector store expiry: %s", exc)
        await asyncio.sleep(knowledge.sweep_seconds)
