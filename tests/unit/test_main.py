"""The application's lifespan (app/main.py)."""

from __future__ import annotations

import gc

import pytest

from app.main import YOUNG_COLLECTION, create_app
from tests.support.gateway import config


@pytest.mark.asyncio
async def test_start_up_objects_are_kept_out_of_full_collections() -> None:
    """A full collection scanned every imported module's objects (45-70 ms with the event loop
    held, the slowest /health answer during issue 25's hostile requests); the lifespan freezes
    them, and gives them back to the collector when it ends (tests run many apps in one process)."""
    app = create_app(config())
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > 100_000
    assert gc.get_freeze_count() == 0


@pytest.mark.asyncio
async def test_young_collections_are_rarer_while_serving_and_restored_after() -> None:
    """At gc's 700 a burst's live objects were promoted into full collections (b40u); the
    lifespan raises generation 0's threshold and gives the process its thresholds back."""
    before = gc.get_threshold()
    assert before[0] < YOUNG_COLLECTION
    app = create_app(config())
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == (YOUNG_COLLECTION, *before[1:])
    assert gc.get_threshold() == before
