"""The batch worker: validates input files, runs lines behind interactive traffic, finalizes.

One :class:`BatchRunner` per process polls the store for batches not yet final and moves each
one step (:meth:`BatchRunner.advance`): a ``validating`` batch has its input file checked
(:mod:`.validate`) by the one worker that claims it in the store (a lease renewed while it
validates: the other workers and replicas leave it alone, and take over only once a dead
holder's lease has run out); an ``in_progress`` one gets lines claimed and run while it has slots; one
without unfinished lines is finalized (output and error files written, then the final status);
a ``cancelling`` one has its running lines stopped (their requests cancelled, so the upstream
generation is closed) and is finalized as ``cancelled``; one past its window is ``expired``.

Each line runs through ``dispatch`` — the gateway's own HTTP route, called in process as the
batch's key (:mod:`app.http.internal`), so a batch line is rendered, parsed, limited, budgeted
and answered exactly like the same request sent live; a line that route refuses gets the same
status and body in the error file.

Behind interactive traffic: at most ``slots`` lines run at once in a process (a share of the
admission's ``max_inflight``, so interactive requests always keep the rest), and no new line
starts while ``busy`` (the app: interactive requests wait for a slot, or the last free slots
are interactive ones).  A slot that finishes a line claims the batch's next one itself (a
*lane*), so a busy batch costs a claim and a finish per line, not a poll.  Transient answers (408, 429,
500, 502, 503, 504, or the route failing) are retried with exponential backoff up to
``max_attempts``, within the window; then the last answer is the line's result.  Leases on
running lines are renewed while they run; a worker that dies stops renewing and its lines are
claimed again by whoever polls next (after a restart: this process again).  A batch that is
no longer active (another replica cancelled or finalized it) has its lines here stopped at the
next poll; of two workers finalizing one batch, the one whose final update loses deletes the
files it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from app.batches.model import Batch, BatchStore, Json, Line, Result, new_request_id
from app.batches.validate import check
from app.core.ids import random_id
from app.knowledge.files import FileStore, NewFile

log = logging.getLogger("ocm_gateway.batches")
Dispatch = Callable[[str | None, str, bytes], Awaitable[tuple[int, bytes]]]
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
EXPIRED = {"code": "batch_expired",
           "message": "This request could not be executed before the completion window expired."}
FINISH_TRIES = 6  # tries to record a line's result before leaving the line to its lease
CANCELLED = {"code": "batch_cancelled", "message": "This request was not run: the batch was cancelled."}


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    slots: int = 2
    poll_seconds: float = 1.0
    lease_seconds: float = 30.0
    max_attempts: int = 5
    backoff_seconds: float = 1.0
    max_lines: int = 50_000
    max_line_bytes: int = 16 * 1024 * 1024


def usage_of(body: Any) -> dict[str, int]:
    """Tokens of one answer, whichever API's usage shape it has."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return {}

    def num(*names: str) -> int:
        for name in names:
            value = usage.get(name)
            if isinstance(value, int):
                return value
        return 0

    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    out_details = usage.get("completion_tokens_details") or usage.get("output_tokens_details") or {}
    return {"input": num("input_tokens", "prompt_tokens"),
            "output": num("output_tokens", "completion_tokens"),
            "cached": int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
            "reasoning": (int(out_details.get("reasoning_tokens") or 0)
                          if isinstance(out_details, dict) else 0)}


class ClaimLost(Exception):
    """The batch's validation claim went to another worker (or the batch moved on)."""


class BatchRunner:
    def __init__(self, store: BatchStore, files: FileStore, dispatch: Dispatch, *,
                 known_model: Callable[[str], bool], busy: Callable[[], bool] = lambda: False,
                 settings: RunnerSettings = RunnerSettings()) -> None:
        self.store, self.files, self.dispatch = store, files, dispatch
        self.known_model, self.busy, self.settings = known_model, busy, settings
        self.worker = random_id("w", 16)
        self.now: Callable[[], float] = time.time  # the clock the window is judged by
        self._running: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._validating: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Look at the store now (a batch was created or cancelled here)."""
        self._wake.set()

    async def run(self) -> None:
        renewer = asyncio.get_running_loop().create_task(self._renew())
        try:
            while True:
                try:
                    active = await self.store.active()
                    for gone in {key[0] for key in self._running} - {b.id for b in active}:
                        await self._stop(gone)  # finished elsewhere (another replica cancelled it)
                    for batch in active:
                        await self.advance(batch)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a store outage: try again at the next poll
                    log.exception("batch worker: a poll failed")
                self._wake.clear()
                with contextlib.suppress(TimeoutError):  # (not wait_for: on 3.11 a cancel that
                    async with asyncio.timeout(self.settings.poll_seconds):  # meets a wake is lost)
                        await self._wake.wait()
        finally:
            renewer.cancel()
            tasks = [*self._running.values(), *self._validating.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def advance(self, batch: Batch) -> None:
        now = self.now()
        if batch.status == "validating":
            if batch.id not in self._validating:
                self._start(self._validating, batch.id, self._validate(batch))
        elif batch.status == "cancelling":
            validating = self._validating.get(batch.id)
            if validating is not None:
                validating.cancel()
                await asyncio.gather(validating, return_exceptions=True)
            await self._stop(batch.id)
            await self.store.abandon(batch.id, CANCELLED)
            await self._finalize(batch, "cancelled")
        elif batch.status == "finalizing":
            await self._finalize(batch, "completed")
        elif batch.status == "in_progress":
            if now >= batch.expires_at:
                await self._stop(batch.id)
                await self.store.abandon(batch.id, EXPIRED)
                await self._finalize(batch, "expired")
                return
            free = self.settings.slots - len(self._running)
            if free > 0 and not self.busy():
                for line in await self.store.claim(batch.id, self.worker, free,
                                                   lease=self.settings.lease_seconds, now=now):
                    self._lane(batch, line)
            mine = any(key[0] == batch.id for key in self._running)
            if not mine and await self.store.unfinished(batch.id) == 0:
                await self._finalize(batch, "completed")

    def _lane(self, batch: Batch, line: Line) -> None:
        """Run ``line`` in a slot of its own; then, while nothing interactive waits (``busy``)
        and the window is open, claim the batch's next line and run it in the same slot — a
        claim per line instead of a poll of every active batch."""
        key = (batch.id, line.line)

        async def lane() -> None:
            nonlocal key
            current = line
            try:
                while True:
                    await self._work(batch, current)
                    if self.busy() or self.now() >= batch.expires_at:
                        return
                    claimed = await self.store.claim(batch.id, self.worker, 1, now=self.now(),
                                                     lease=self.settings.lease_seconds)
                    if not claimed:
                        return
                    current, task = claimed[0], self._running.pop(key)
                    key = (batch.id, current.line)
                    self._running[key] = task
            except asyncio.CancelledError:
                raise
            except Exception:  # a store outage: the line's lease runs out and it is retaken
                log.exception("batch worker: line %s of %s failed", key[1], key[0])
            finally:
                self._running.pop(key, None)
                self._wake.set()

        self._running[key] = asyncio.get_running_loop().create_task(lane())

    def _start(self, where: dict[Any, asyncio.Task[None]], key: Any, work: Awaitable[None]) -> None:
        async def wrapped() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("batch worker: %s failed", key)
            finally:
                where.pop(key, None)
                self._wake.set()

        where[key] = asyncio.get_running_loop().create_task(wrapped())

    async def _stop(self, batch_id: str) -> None:
        tasks = [task for key, task in self._running.items() if key[0] == batch_id]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_seconds / 3)
            if self._running:
                with contextlib.suppress(Exception):
                    await self.store.renew(self.worker, list(self._running),
                                           until=time.time() + self.settings.lease_seconds)

    async def _validate(self, batch: Batch) -> None:
        """Validate ``batch`` if this worker claims it (else another does: the next poll looks
        again), renewing the claim meanwhile; a claim lost stops the validation."""
        lease = self.settings.lease_seconds
        if not await self.store.claim_batch(batch.id, self.worker, lease=lease, now=time.time()):
            return
        me = asyncio.current_task()

        async def hold() -> None:
            while True:
                await asyncio.sleep(lease / 3)
                try:
                    held = await self.store.claim_batch(batch.id, self.worker, lease=lease,
                                                        now=time.time())
                except Exception:  # a store outage: every write checks the claim anyway
                    continue
                if not held and me is not None:
                    me.cancel()
                    return

        holder = asyncio.get_running_loop().create_task(hold())
        try:
            await self._check(batch)
        except ClaimLost:
            log.info("batch worker: %s is validated by another worker", batch.id)
        finally:
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)

    async def _check(self, batch: Batch) -> None:
        # a validation a restart interrupted starts over
        if not await self.store.clear_lines(batch.id, worker=self.worker):
            raise ClaimLost
        opened = await self.files.open(batch.input_file_id, batch.owner)
        if opened is None:
            await self._fail(batch, [{"code": "invalid_file", "line": None, "param": "input_file_id",
                                      "message": "The input file no longer exists."}])
            return
        meta, chunks = opened
        allowed = batch.allowed_models
        kept, read = 0, 0

        async def counted() -> AsyncIterator[bytes]:
            nonlocal read
            async for chunk in chunks:
                read += len(chunk)
                yield chunk

        def may_use(model: str) -> bool:
            return (allowed is None or model in allowed) and self.known_model(model)

        async def keep(lines: list[Line]) -> None:
            nonlocal kept
            kept += len(lines)
            if not await self.store.add_lines(batch.id, [replace(ln, batch_id=batch.id) for ln in lines],
                                              worker=self.worker):
                raise ClaimLost

        checked = await check(counted(), batch.endpoint, may_use, max_lines=self.settings.max_lines,
                              max_line=self.settings.max_line_bytes, keep=keep)
        # deleted while it streamed (PostgreSQL's chunks then just end): not a shorter file
        if ((not checked.errors and read != meta.bytes)
                or await self.files.get(meta.id, batch.owner) is None):
            checked.errors = [{"code": "invalid_file", "line": None, "param": "input_file_id",
                               "message": "The input file was deleted while the batch was being "
                                          "validated."}]
        if checked.errors:
            if not await self.store.clear_lines(batch.id, worker=self.worker):
                raise ClaimLost
            await self._fail(batch, checked.errors)
            return
        batch.total, batch.status = kept, "in_progress"
        batch.model = next(iter(checked.models)) if len(checked.models) == 1 else None
        batch.times["in_progress_at"] = int(time.time())
        await self.store.update(batch, expect=["validating"], holder=self.worker)

    async def _fail(self, batch: Batch, errors: list[Json]) -> None:
        batch.status, batch.errors = "failed", errors
        batch.times["failed_at"] = int(time.time())
        await self.store.update(batch, expect=["validating"], holder=self.worker)

    async def _work(self, batch: Batch, line: Line) -> None:
        try:
            status, raw = await self.dispatch(batch.key_digest, batch.endpoint, line.body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the route itself failed: as the client would see a 500
            log.exception("batch worker: line %s of %s", line.line, batch.id)
            status, raw = 500, orjson.dumps({"error": {"message": f"internal error: {type(exc).__name__}",
                                                       "type": "server_error", "code": "internal_error"}})
        deadline = batch.expires_at
        attempts = line.attempts + 1
        if status in RETRYABLE and attempts < self.settings.max_attempts:
            due = time.time() + self.settings.backoff_seconds * 2 ** line.attempts
            if due < deadline:
                await self.store.retry(line, self.worker, not_before=due)
                return
        try:
            body: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        result = Result(line.custom_id, new_request_id(), status, body)
        await self._finish(line, result, usage_of(body) if result.ok else {})

    async def _finish(self, line: Line, result: Result, usage: dict[str, int]) -> None:
        """Record a line's result, retrying a store that fails (its lease is renewed meanwhile,
        the line still being in ``_running``) so an outage does not cost the request again;
        past :data:`FINISH_TRIES` the error propagates and the line, its lease run out, is
        run again."""
        for attempt in range(FINISH_TRIES):
            try:
                await self.store.finish(line, self.worker, result, usage)
                return
            except Exception:
                if attempt == FINISH_TRIES - 1:
                    raise
                log.warning("batch worker: recording line %s of %s failed; retrying", line.line,
                            line.batch_id, exc_info=True)
                await asyncio.sleep(min(self.settings.backoff_seconds * 2 ** attempt, 10.0))

    async def _finalize(self, batch: Batch, final: str) -> None:
        batch = await self.store.refresh(batch)
        if batch.status not in ("finalizing", "in_progress", "cancelling"):
            return
        if batch.status == "in_progress":
            batch.status = "finalizing"
            batch.times["finalizing_at"] = int(time.time())
            if final == "expired":  # remembered, should a restart finish the finalizing
                batch.times["expired_at"] = batch.times["finalizing_at"]
            if not await self.store.update(batch, expect=["in_progress"]):
                return  # cancelled meanwhile: the next poll cancels
        written: list[str] = []
        if batch.output_file_id is None:
            batch.output_file_id = await self._write(batch, ok=True)
            written += [batch.output_file_id] if batch.output_file_id else []
        if batch.error_file_id is None:
            batch.error_file_id = await self._write(batch, ok=False)
            written += [batch.error_file_id] if batch.error_file_id else []
        if final == "completed" and "expired_at" in batch.times:
            final = "expired"
        batch.status = final  # type: ignore[assignment]
        batch.times.setdefault(f"{final}_at", int(time.time()))
        if final != "completed":
            batch.times.setdefault("finalizing_at", batch.times[f"{final}_at"])
        if not await self.store.update(batch, expect=["finalizing", "cancelling"]):
            # another worker (a replica) finalized it first: its files are the batch's, these
            # copies would be left in the key's file list
            for file_id in written:
                with contextlib.suppress(Exception):
                    await self.files.delete(file_id, batch.owner)

    async def _write(self, batch: Batch, *, ok: bool) -> str | None:
        """The output (``ok``) or error file, streamed from the stored results; None if empty."""
        pages = self.store.result_lines(batch.id, ok=ok)
        first = await anext(pages, None)
        if first is None:
            return None

        async def lines() -> AsyncIterator[bytes]:  # as stored: nothing parsed on the loop
            page: list[bytes] | None = first
            while page is not None:
                yield b"\n".join(page) + b"\n"
                page = await anext(pages, None)

        now = int(time.time())
        expires = None if batch.output_expires_after is None else now + batch.output_expires_after
        name = f"{batch.id}_{'output' if ok else 'error'}.jsonl"
        stored = await self.files.put(batch.owner, lines(), lambda: NewFile(
            name, "batch_output", "application/jsonl", expires), max_bytes=1 << 62)
        return stored.id
