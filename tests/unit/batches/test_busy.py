"""The batch worker takes only a backend's free slots: while a bounded replica (a llama.cpp
server's ``total_slots``, or ``[models.X] max_inflight``) is full or has requests waiting, no
new batch line starts (``busy``), so interactive requests never queue behind batch lines there."""

from __future__ import annotations

from app.config import GatewayConfig
from app.main import create_app
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, config


async def test_a_full_replica_makes_the_batch_worker_wait() -> None:
    base = config().model_dump()
    base["models"][MODEL]["max_inflight"] = 1  # one generation at a time to the replica
    app = create_app(GatewayConfig.model_validate(base), transport=FakeLlamaCpp("").transport())
    async with app.router.lifespan_context(app):
        runner, gates = app.state.batch_runner, app.state.registry.gates
        assert runner is not None and len(gates) == 1
        gate = next(iter(gates.values()))
        assert not runner.busy()
        await gate.acquire()  # an interactive generation holds the replica's only slot
        assert runner.busy()
        gate.release()
        assert not runner.busy()
