"""The vector-store catalog contract of app/knowledge/catalog.py, held by both implementations:
SQLite (a file; the shared connection) and PostgreSQL (a real server, tests/support/
postgres.py) run the same scenarios — owners, counters and statuses, pages both ways, updates,
replacing a file, batches and their cancel, expiry, and the job queue (one claim per job,
leases that run out, tokens that stop a stale worker, the attempts bound)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiosqlite
import pytest

from app.knowledge.catalog import (
    MAX_ATTEMPTS,
    NewEntry,
    NewStore,
    Page,
    StoreChanges,
    VectorStoreCatalog,
)
from app.knowledge.postgres_catalog import PostgresCatalog
from app.knowledge.sqlite_catalog import SqliteCatalog
from app.knowledge.vectors import Chunking, EmbeddingSpace
from tests.support.postgres import fresh_pool, postgres_server

NOW = 1_800_000_000
PLAN = Chunking(800, 400, "auto")


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
async def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStoreCatalog]:
    if request.param == "postgres":
        pool = await fresh_pool(request.getfixturevalue("postgres"))
        yield PostgresCatalog(pool)
        await pool.close()
        return
    db = await aiosqlite.connect(tmp_path / "s.sqlite3")
    yield await SqliteCatalog.create(db)
    await db.close()


def entry(file_id: str, **attributes: str | float | bool) -> NewEntry:
    return NewEntry(file_id, f"{file_id}.txt", PLAN, attributes)


async def store(catalog: VectorStoreCatalog, owner: str = "alice", *files: str, name: str = "s",
                days: int | None = None) -> str:
    made = await catalog.create_store(NewStore(owner, name, {"k": "v"}, days), [entry(f) for f in files], NOW)
    return made.id


async def test_a_store_its_counters_and_its_owner(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog, "alice", "file-a", "file-b")
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.status == "in_progress" and got.usage_bytes == 0
    r = got.resource()
    assert r["file_counts"] == {"in_progress": 2, "completed": 0, "failed": 0, "cancelled": 0, "total": 2}
    assert (r["object"], r["name"], r["metadata"], r["expires_after"], r["last_active_at"]) == \
           ("vector_store", "s", {"k": "v"}, None, NOW)
    assert await catalog.get_store("bob", sid) is None
    assert await catalog.add_files("bob", sid, [entry("file-c")], NOW) is None
    assert await catalog.get_file("bob", sid, "file-a") is None
    assert not await catalog.remove_file("bob", sid, "file-a")
    assert not await catalog.delete_store("bob", sid)
    assert await catalog.page_files("bob", sid, Page()) == []
    jobs = [await catalog.claim(NOW), await catalog.claim(NOW)]
    assert all(j is not None for j in jobs) and await catalog.claim(NOW) is None
    a, b = sorted((j for j in jobs if j is not None), key=lambda j: j.file_id)
    assert (a.owner, a.filename, a.chunking, a.attempts) == ("alice", "file-a.txt", PLAN, 1)
    assert await catalog.finish(a, 120)
    assert await catalog.fail(b, "invalid_file", "not UTF-8")
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.status == "completed" and got.usage_bytes == 120
    assert got.counts.resource() == {"in_progress": 0, "completed": 1, "failed": 1, "cancelled": 0,
                                     "total": 2}
    failed = await catalog.get_file("alice", sid, "file-b")
    assert failed is not None and failed.resource()["last_error"] == {"code": "invalid_file",
                                                                       "message": "not UTF-8"}
    assert await catalog.delete_store("alice", sid)
    assert await catalog.get_store("alice", sid) is None
    assert await catalog.get_file("alice", sid, "file-a") is None


async def test_pages_both_ways(catalog: VectorStoreCatalog) -> None:
    ids = [await store(catalog, "alice", name=str(i)) for i in range(5)]
    await store(catalog, "bob")

    async def names(page: Page) -> list[str] | None:
        found = await catalog.page_stores("alice", page)
        return None if found is None else [s.name for s in found]

    assert await names(Page(limit=10)) == ["4", "3", "2", "1", "0"]
    assert await names(Page(limit=2, ascending=True)) == ["0", "1"]
    assert await names(Page(limit=2, after=ids[3])) == ["2", "1"]
    assert await names(Page(limit=2, after=ids[1], ascending=True)) == ["2", "3"]
    assert await names(Page(limit=2, before=ids[1])) == ["3", "2"]  # the two just before it, newest first
    assert await names(Page(limit=2, before=ids[3], ascending=True)) == ["1", "2"]
    assert await names(Page(after="vs_nope")) is None
    bobs = await catalog.page_stores("bob", Page())
    assert bobs is not None and await catalog.page_stores("alice", Page(after=bobs[0].id)) is None


async def test_updates(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog)
    got = await catalog.update_store("alice", sid, StoreChanges(name="renamed", set_name=True), NOW + 5)
    assert got is not None and got.name == "renamed" and got.metadata == {"k": "v"}
    got = await catalog.update_store("alice", sid, StoreChanges(expires_after_days=2, set_expiry=True), NOW)
    assert got is not None and got.resource()["expires_after"] == {"anchor": "last_active_at", "days": 2}
    assert got.expires_at == NOW + 2 * 86400
    got = await catalog.update_store("alice", sid, StoreChanges(metadata=None, set_metadata=True,
                                                                set_expiry=True), NOW)
    assert got is not None and got.resource()["metadata"] == {} and got.expires_at is None
    assert await catalog.update_store("bob", sid, StoreChanges(name="x", set_name=True), NOW) is None
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.name == "renamed"


async def test_files_replace_filter_and_attributes(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog, "alice", "file-a", "file-b", "file-c")
    job = await catalog.claim(NOW)
    assert job is not None and job.file_id == "file-a"
    assert await catalog.finish(job, 10)
    done = await catalog.page_files("alice", sid, Page(), status="completed")
    assert done is not None and [f.file_id for f in done] == ["file-a"]
    pending = await catalog.page_files("alice", sid, Page(ascending=True), status="in_progress")
    assert pending is not None and [f.file_id for f in pending] == ["file-b", "file-c"]
    again = await catalog.add_files("alice", sid, [entry("file-a", team="x")], NOW + 1)
    assert again is not None and again[0].status == "in_progress" and again[0].attributes == {"team": "x"}
    listed = await catalog.page_files("alice", sid, Page(limit=10))
    assert listed is not None and [f.file_id for f in listed] == ["file-a", "file-c", "file-b"]
    tagged = await catalog.set_attributes("alice", sid, "file-b", {"n": 2.5, "ok": True})
    assert tagged is not None and tagged.resource()["attributes"] == {"n": 2.5, "ok": True}
    assert await catalog.set_attributes("bob", sid, "file-b", {}) is None
    assert await catalog.remove_file("alice", sid, "file-c")
    claimed = {j.file_id for j in [await catalog.claim(NOW), await catalog.claim(NOW)] if j is not None}
    assert claimed == {"file-a", "file-b"} and await catalog.claim(NOW) is None  # file-c's job went with it


async def test_a_stale_worker_changes_nothing(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog, "alice", "file-a")
    first = await catalog.claim(NOW, lease=30)
    assert first is not None and await catalog.claim(NOW + 10) is None  # leased
    assert await catalog.renew(first, NOW + 20, lease=30)
    assert await catalog.claim(NOW + 40) is None  # renewed until NOW + 50
    second = await catalog.claim(NOW + 51)  # its worker died: taken over
    assert second is not None and second.token != first.token and second.attempts == 2
    assert not await catalog.renew(first, NOW + 52) and not await catalog.finish(first, 1)
    await catalog.add_files("alice", sid, [entry("file-a")], NOW)  # added again: a new job
    assert not await catalog.finish(second, 1)
    third = await catalog.claim(NOW + 60)
    assert third is not None and third.attempts == 1
    await catalog.release(third)
    fourth = await catalog.claim(NOW + 60)
    assert fourth is not None and fourth.attempts == 1  # given back, not counted
    assert await catalog.finish(fourth, 7, EmbeddingSpace("m", 384))
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.space == EmbeddingSpace("m", 384) and got.usage_bytes == 7


async def test_a_job_that_keeps_dying_fails(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog, "alice", "file-a")
    t = NOW
    for _ in range(MAX_ATTEMPTS):
        assert await catalog.claim(t, lease=5) is not None
        t += 10
    assert await catalog.claim(t) is None
    got = await catalog.get_file("alice", sid, "file-a")
    assert got is not None and got.status == "failed" and got.last_error is not None
    assert got.last_error[0] == "server_error"


async def test_batches_and_cancel(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog, "alice", "file-a")
    added = await catalog.add_files("alice", sid, [entry("file-b"), entry("file-c")], NOW, "vsfb_1")
    assert added is not None and [f.file_id for f in added] == ["file-b", "file-c"]
    batch = await catalog.get_batch("alice", sid, "vsfb_1")
    assert batch is not None and batch.status == "in_progress" and batch.counts.total == 2
    assert batch.resource()["object"] == "vector_store.files_batch"
    assert await catalog.get_batch("bob", sid, "vsfb_1") is None
    assert await catalog.cancel_batch("bob", sid, "vsfb_1") is None
    members = await catalog.page_files("alice", sid, Page(ascending=True), batch_id="vsfb_1")
    assert members is not None and [f.file_id for f in members] == ["file-b", "file-c"]
    job = await catalog.claim(NOW)
    assert job is not None and job.file_id == "file-a"
    job_b = await catalog.claim(NOW)
    assert job_b is not None and await catalog.finish(job_b, 3)
    cancelled = await catalog.cancel_batch("alice", sid, "vsfb_1")
    assert cancelled is not None and cancelled.status == "cancelled"
    assert cancelled.counts.resource() == {"in_progress": 0, "completed": 1, "failed": 0, "cancelled": 1,
                                           "total": 2}
    assert await catalog.claim(NOW + 10) is None  # file-c's job is gone; file-a is still leased
    got = await catalog.get_file("alice", sid, "file-a")
    assert got is not None and got.status == "in_progress"


async def test_expiry_and_activity(catalog: VectorStoreCatalog) -> None:
    sid = await store(catalog, "alice", "file-a", days=1)
    other = await store(catalog, "alice", days=3)
    await catalog.touch("alice", [sid], NOW + 30)  # under a minute since: not written
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.last_active_at == NOW
    await catalog.touch("bob", [sid], NOW + 3600)
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.last_active_at == NOW
    await catalog.touch("alice", [other], NOW + 3600)
    got = await catalog.get_store("alice", other)
    assert got is not None and (got.last_active_at, got.expires_at) == (NOW + 3600, NOW + 3600 + 3 * 86400)
    assert await catalog.expire(NOW + 86400 - 1) == []
    assert await catalog.expire(NOW + 86400 + 1) == [sid]
    got = await catalog.get_store("alice", sid)
    assert got is not None and got.status == "expired" and got.counts.cancelled == 1
    assert await catalog.claim(NOW + 86400 + 2) is None
    assert await catalog.expire(NOW + 86400 + 5) == []


async def test_claims_at_once_never_share_a_job(catalog: VectorStoreCatalog) -> None:
    await store(catalog, "alice", *(f"file-{i}" for i in range(12)))
    jobs = await asyncio.gather(*(catalog.claim(NOW) for _ in range(16)))
    claimed = [j.file_id for j in jobs if j is not None]
    assert sorted(claimed) == sorted(f"file-{i}" for i in range(12))


async def test_sqlite_reopened_resumes_the_jobs_of_a_dead_process(tmp_path: Path) -> None:
    db = await aiosqlite.connect(tmp_path / "s.sqlite3")
    catalog = await SqliteCatalog.create(db)
    await store(catalog, "alice", "file-a")
    job = await catalog.claim(NOW, lease=3600)
    assert job is not None and await catalog.claim(NOW) is None
    await db.close()
    db = await aiosqlite.connect(tmp_path / "s.sqlite3")
    reopened = await SqliteCatalog.create(db)
    again = await reopened.claim(NOW)
    assert again is not None and again.file_id == "file-a" and again.attempts == 2
    assert not await reopened.finish(job, 1) and await reopened.finish(again, 1)
    await db.close()


async def test_sqlite_leaves_the_leases_of_live_sibling_processes(tmp_path: Path) -> None:
    """``--workers N`` share the SQLite file: a worker starting must not take its siblings' jobs."""
    import os
    import sys

    child = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await child.wait()  # a process that has exited: its pid is free
    db = await aiosqlite.connect(tmp_path / "s.sqlite3")
    catalog = await SqliteCatalog.create(db)
    await store(catalog, "alice", "file-live", "file-dead")
    await db.execute("UPDATE ingest_jobs SET lease_until = ?, token = ? WHERE file_id = 'file-live'",
                     (NOW + 3600, f"{os.getppid()}-sibling"))
    await db.execute("UPDATE ingest_jobs SET lease_until = ?, token = ? WHERE file_id = 'file-dead'",
                     (NOW + 3600, f"{child.pid}-exited"))
    await db.commit()
    reopened = await SqliteCatalog.create(db)
    job = await reopened.claim(NOW)
    assert job is not None and job.file_id == "file-dead"
    assert await reopened.claim(NOW) is None  # the live sibling's job stays its own
    await db.close()
