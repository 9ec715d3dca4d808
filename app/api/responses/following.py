"""Responses run by another replica (or by none any more): a cancel sent to the owner
(:func:`cancel_elsewhere`: on Redis, or recorded in the store when Redis is down; a delete
waits for the same end, :func:`delete_elsewhere`), a run
whose owner stopped updating it (:func:`lost`), and where a follower's stream gets its end
when Redis does not say (:class:`StoredEnd`, the
:class:`~app.engine.signals.Settle` of a :class:`~app.engine.signals.RemoteReader`).

The owner stores a run's end (its events and the resource) before anyone hears its terminal;
a dead owner's run reads ``failed`` / ``run_lost`` once its heartbeat is stale.  So the store
always ends a follower's stream with the terminal of the state it records, whether the
owner's Redis copy stopped (Redis down) or the owner itself did (kill -9).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from app.core.errors import GatewayError, Overloaded, error_fields
from app.engine.signals import Signals, SignalsUnavailable
from app.stores.base import ResponseStore, StoredResponse

Json = dict[str, Any]
RUNNING = ("queued", "in_progress")
_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete"}


def lost(resource: Json) -> Json:
    """A run whose process died (kill -9, crash), or could not store its end within its
    bounded wait: it ends ``failed``, its open items incomplete."""
    output = [{**item, "status": "incomplete"} if item.get("status") == "in_progress" else item
              for item in resource.get("output", [])]
    return {**resource, "status": "failed", "output": output, "error": {
        "code": "run_lost", "message": "The gateway stopped updating this response before it "
                                       "finished (the process running it stopped, or could not "
                                       "store its end); the response is incomplete."}}


async def cancel_elsewhere(signals: Signals, response_id: str,
                           read: Callable[[], Awaitable[StoredResponse]],
                           record: Callable[[], Awaitable[bool]] | None = None, *,
                           record_wait: float = 6.0) -> Json:
    """The run is another replica's: signal it, then wait (5 s at most) for its owner to
    store the end, and answer the stored response.  A published signal reaches only listeners
    subscribed at that moment (a replica whose Redis connection is being re-made misses it),
    so it is published again every half second until the end is stored: delivered at least
    once, and a cancel is idempotent.  The owner not confirming in time: 503 with
    ``Retry-After``.

    Redis unavailable: with ``record`` (the store's ``request_cancel``) the cancel is recorded
    in the store instead, where the owner's heartbeat reads it; the wait is then
    ``record_wait`` from that moment (a heartbeat and a margin), and its end answers the
    response as it stands: ``cancelled`` once the owner acted, else still ``in_progress``, the
    cancel recorded (the owner ends it at its next heartbeat).  Without ``record``, Redis
    unavailable for the first signal is a 503 ``signals_unavailable`` (nothing cancelled); for a
    later one, the first may still land."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    signal_at = loop.time()
    sent = recorded = False
    while loop.time() < deadline:
        if loop.time() >= signal_at and not recorded:
            signal_at = loop.time() + 0.5
            try:
                await signals.cancel(response_id)
                sent = True
            except SignalsUnavailable:
                if record is None and not sent:
                    raise
                if record is not None:  # through the store; Redis is no longer tried
                    recorded = True
                    deadline = max(deadline, loop.time() + record_wait)
                    if not await record():  # ended (or gone) meanwhile: answer what is stored
                        return (await read()).resource
        await asyncio.sleep(0.2 if recorded else 0.05)
        stored = await read()
        if stored.resource["status"] not in RUNNING:
            return stored.resource
    if recorded:
        return (await read()).resource
    raise Overloaded(f"The replica running response {response_id!r} did not confirm the cancel; "
                     "try again.", retry_after=1.0)


async def delete_elsewhere(signals: Signals, response_id: str,
                           read: Callable[[], Awaitable[StoredResponse]],
                           record: Callable[[], Awaitable[bool]], heartbeat: float) -> None:
    """Before a delete, another replica's run ended as a cancel ends it (:func:`cancel_elsewhere`:
    Redis down, through the store, waiting a heartbeat and a margin).  Still running after that
    (its owner reads the recorded cancel at its next heartbeat): 503 with ``Retry-After``,
    nothing deleted, the cancel recorded; a delete now would be undone when the owner stores
    the end."""
    ended = await cancel_elsewhere(signals, response_id, read, record,
                                   record_wait=min(heartbeat + 1.0, 10.0))
    if ended["status"] in RUNNING:
        raise Overloaded(f"Response {response_id!r} runs on another replica, which has not ended it "
                         "yet: its cancel is recorded; retry the delete.",
                         retry_after=max(1.0, min(heartbeat, 30.0)))


def _seq(payload: Json) -> int:
    seq = payload.get("sequence_number")
    return seq if isinstance(seq, int) else -1


class StoredEnd:
    """The end of response ``response_id`` as the store records it.  ``read`` is the service's
    read of the stored response (it ends a dead owner's run as ``run_lost``)."""

    def __init__(self, response_id: str, tenant: str, store: ResponseStore,
                 read: Callable[[], Awaitable[StoredResponse]]) -> None:
        self._id = response_id
        self._tenant = tenant
        self._store = store
        self._read = read

    async def ended(self, after: int | None) -> list[Json] | None:
        """None while the run is in flight; else the payloads after ``after``: the stored
        events, or (none stored: the owner died) one terminal event of the stored resource."""
        resource = (await self._read()).resource
        status = resource.get("status")
        if status in RUNNING:
            return None
        events = await self._store.get_events(self._id, self._tenant)
        last = -1 if after is None else after
        if events:
            return [e for e in events if _seq(e) > last]
        return [{"type": _TERMINAL.get(str(status), "response.failed"), "sequence_number": last + 1,
                 "response": resource}]

    def error(self, after: int | None, reason: GatewayError) -> list[Json]:
        """An ``error`` event: this reader stops following a response that has not ended (it
        can be followed again; its state is read as usual).  It repeats the last sequence
        number sent (the run's next one is still to come: resuming after it skips nothing)."""
        payload = error_fields(reason.message, reason.type, reason.code, None)
        flat = {k: v for k, v in payload.items() if k != "type"}
        seq = {} if after is None else {"sequence_number": after}
        return [{"type": "error", **seq, **flat, "error": payload}]
