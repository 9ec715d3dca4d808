"""The Batch API's nouns — a batch, its lines, their results — and the store's contract.

A **batch** is OpenAI's ``batch`` object: an input file of JSONL requests for one endpoint,
worked in the background.  Its status moves ``validating`` → ``in_progress`` →
``finalizing`` → ``completed``; or ``failed`` (the input file did not validate: ``errors``
lists each bad line, and no request ran); ``expired`` (the completion window ended: what
completed is in the output file, the rest in the error file as ``batch_expired``);
``cancelling`` → ``cancelled`` (requests in flight are stopped; what completed is kept).

A **line** is one request of the input.  Its state is kept in the store, so a batch survives
a restart or a kill -9: ``pending`` → ``running`` (claimed by one worker under a lease that
expires, so a dead worker's lines are taken over) → ``done`` (its result — the endpoint's
status and body — recorded once, with the batch's counters in the same transaction).  A line
whose result is recorded is never run again; a line that was running when its worker died
is run again (its result was never recorded, so it appears once in the output).

Store contract (:class:`BatchStore`; SQLite: :mod:`.sqlite_batches`):

* every read names an owner; another owner's batch is missing (``None``);
* ``claim`` hands out at most ``n`` lines that are pending (and due: ``not_before`` passed)
  or running under an expired lease, marking them running for ``worker`` until ``lease``;
* ``finish`` records a line's result only if ``worker`` still holds it (``False`` otherwise:
  another worker took it over; its result wins) and counts it in ``request_counts``;
* ``retry`` puts a held line back to pending, due at ``not_before``, one attempt more;
* ``claim_batch`` gives a ``validating`` batch to one ``worker`` until ``now + lease`` (its
  holder renews by claiming again; a lapsed claim goes to the next claimer); ``add_lines``,
  ``clear_lines`` and ``update(holder=...)`` write only for the holder of a batch still
  ``validating`` (``False`` otherwise), so of several workers or replicas one validates a
  batch, and none rewrites its lines once it has moved on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import orjson

from app.core.ids import random_id

Json = dict[str, Any]
Status = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired",
                 "cancelling", "cancelled"]
ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions",
             "/v1/messages")
ACTIVE: tuple[Status, ...] = ("validating", "in_progress", "finalizing", "cancelling")
WINDOW = 24 * 3600  # "24h", the only completion window


def new_batch_id() -> str:
    return random_id("batch_", 24)


def new_request_id() -> str:
    return random_id("batch_req_", 24)


@dataclass(slots=True)
class Batch:
    id: str
    owner: str
    key_digest: str | None  # the key that made it: each line runs as that key (None: auth off)
    endpoint: str
    input_file_id: str
    created_at: int
    expires_at: int
    status: Status = "validating"
    metadata: Mapping[str, str] | None = None
    output_expires_after: int | None = None  # seconds after the output file's creation
    times: dict[str, int] = field(default_factory=dict)  # in_progress_at, ..., cancelled_at
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[Json] | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)  # input, output, cached, reasoning
    allowed_models: list[str] | None = None  # the key's allow-list when the batch was made

    # the columns every store keeps, in this order; the rest is one JSON document (:meth:`doc`)
    COLUMNS: ClassVar[str] = ("id, owner, key_digest, endpoint, input_file_id, created_at, "
                              "expires_at, status, doc, total, completed, failed, usage")

    def doc(self) -> bytes:
        """What the store keeps of the batch beside its columns."""
        return orjson.dumps({"metadata": self.metadata, "output_expires_after": self.output_expires_after,
                             "times": self.times, "output_file_id": self.output_file_id,
                             "error_file_id": self.error_file_id, "errors": self.errors,
                             "model": self.model, "allowed_models": self.allowed_models})

    @classmethod
    def from_row(cls, row: Iterable[Any]) -> Batch:
        """A batch from its :data:`COLUMNS` as a store reads them."""
        (bid, owner, digest, endpoint, input_file, created, expires, status, doc, total, completed,
         failed, usage) = tuple(row)
        extra = orjson.loads(doc)
        return cls(str(bid), str(owner), digest, str(endpoint), str(input_file), int(created),
                   int(expires), status, extra.get("metadata"), extra.get("output_expires_after"),
                   extra.get("times", {}), extra.get("output_file_id"), extra.get("error_file_id"),
                   extra.get("errors"), int(total), int(completed), int(failed), extra.get("model"),
                   orjson.loads(usage), extra.get("allowed_models"))

    def resource(self) -> Json:
        """The ``batch`` object OpenAI's API returns."""
        usage = self.usage
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint, "model": self.model,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id, "completion_window": "24h",
            "status": self.status, "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id, "created_at": self.created_at,
            "in_progress_at": self.times.get("in_progress_at"), "expires_at": self.expires_at,
            "finalizing_at": self.times.get("finalizing_at"),
            "completed_at": self.times.get("completed_at"),
            "failed_at": self.times.get("failed_at"), "expired_at": self.times.get("expired_at"),
            "cancelling_at": self.times.get("cancelling_at"),
            "cancelled_at": self.times.get("cancelled_at"),
            "request_counts": {"total": self.total, "completed": self.completed,
                               "failed": self.failed},
            "usage": {"input_tokens": usage.get("input", 0),
                      "input_tokens_details": {"cached_tokens": usage.get("cached", 0)},
                      "output_tokens": usage.get("output", 0),
                      "output_tokens_details": {"reasoning_tokens": usage.get("reasoning", 0)},
                      "total_tokens": usage.get("input", 0) + usage.get("output", 0)},
            "metadata": dict(self.metadata) if self.metadata is not None else None,
        }


@dataclass(frozen=True, slots=True)
class Line:
    """One request of a batch (``line``: its 1-based line number in the input file)."""

    batch_id: str
    line: int
    custom_id: str
    body: bytes  # the request's JSON body, as given
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class Result:
    """What a line came to: the endpoint's answer (``status_code``, ``body``), or ``error``
    when it could not be run at all (``{"code", "message"}``, e.g. ``batch_expired``)."""

    custom_id: str
    request_id: str
    status_code: int | None
    body: Any = None
    error: Json | None = None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @classmethod
    def parse(cls, raw: bytes) -> Result:
        """The result an :meth:`output_line` stored as JSON was made from."""
        data = orjson.loads(raw)
        response = data.get("response") or {}
        return cls(data["custom_id"], data["id"], response.get("status_code"), response.get("body"),
                   data.get("error"))

    def output_line(self) -> Json:
        """The line as OpenAI writes it in the output / error file."""
        response = (None if self.status_code is None else
                    {"status_code": self.status_code, "request_id": self.request_id,
                     "body": self.body})
        return {"id": self.request_id, "custom_id": self.custom_id, "response": response,
                "error": self.error}


def abandoned(rows: Iterable[Any], error: Json) -> list[tuple[bytes, int]]:
    """The stored result (and line number) of each ``(line, custom_id)`` row given ``error`` —
    tens of thousands for a big batch cancelled or expired: a store runs this in a thread."""
    return [(orjson.dumps(Result(str(row[1]), new_request_id(), None, error=error).output_line()),
             int(row[0])) for row in rows]


class BatchStore(Protocol):
    async def create(self, batch: Batch) -> None: ...

    async def get(self, batch_id: str, owner: str) -> Batch | None: ...

    async def page(self, owner: str, *, limit: int, after: str | None) -> list[Batch] | None: ...

    async def active(self) -> list[Batch]:
        """Every batch not yet in a final state, of every owner (the workers' view)."""
        ...

    async def update(self, batch: Batch, *, expect: Sequence[Status] | None = None,
                     holder: str | None = None) -> bool:
        """Store ``batch``'s status, times, files and errors — if its stored status is one of
        ``expect`` (when given) and ``holder`` holds its claim (when given): the transitions
        race between workers and ``cancel``."""
        ...

    async def claim_batch(self, batch_id: str, worker: str, *, lease: float, now: float) -> bool:
        """Take (or renew) the claim on validating ``batch_id`` until ``now + lease``: whether
        ``worker`` holds it now (``False``: another's claim is live, or it is not validating)."""
        ...

    async def add_lines(self, batch_id: str, lines: Sequence[Line], *, worker: str) -> bool:
        """Add ``lines`` if ``worker`` holds the claim of the still validating batch."""
        ...

    async def clear_lines(self, batch_id: str, *, worker: str) -> bool:
        """Delete the batch's lines (a validation starting over) on the same condition."""
        ...

    async def claim(self, batch_id: str, worker: str, n: int, *, lease: float,
                    now: float) -> list[Line]: ...

    async def finish(self, line: Line, worker: str, result: Result,
                     usage: Mapping[str, int]) -> bool: ...

    async def retry(self, line: Line, worker: str, *, not_before: float) -> None: ...

    async def renew(self, worker: str, lines: Sequence[tuple[str, int]], *, until: float) -> None:
        """Extend ``worker``'s leases on ``lines`` (``(batch_id, line)``) to ``until``."""
        ...

    async def unfinished(self, batch_id: str) -> int:
        """Lines without a result (pending or running)."""
        ...

    async def abandon(self, batch_id: str, error: Json) -> int:
        """Give every line without a result ``error`` (expiry, cancel); how many."""
        ...

    def results(self, batch_id: str, *, ok: bool) -> AsyncIterator[Result]:
        """The recorded results, successes or failures, in input order."""
        ...

    def result_lines(self, batch_id: str, *, ok: bool) -> AsyncIterator[list[bytes]]:
        """The same, as the output file's lines (JSON, as stored), a page at a time: the
        output and error files are written from these without parsing them again."""
        ...

    async def refresh(self, batch: Batch) -> Batch:
        """``batch`` as stored now (counters, status)."""
        ...

    async def close(self) -> None: ...
