"""The retention job for files (``app.stores.sweep_files``): expired files are deleted by the
job every process runs, the others kept; the embedded store opens its file store beside the
SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from app.knowledge.files import NewFile
from app.stores import open_stores, sweep_files


async def one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_expired_files_are_swept(tmp_path: Path) -> None:
    stores = await open_stores(str(tmp_path / "db" / "responses.sqlite3"))
    try:
        files = stores.files
        assert files is not None
        old = await files.put("alice", one(b"old"), lambda: NewFile("a", "batch", "text/plain", 1),
                              max_bytes=10)
        kept = await files.put("alice", one(b"kept"), lambda: NewFile("b", "batch", "text/plain", None),
                               max_bytes=10)
        assert (tmp_path / "db" / "files" / old.id).exists()
        job = asyncio.get_running_loop().create_task(sweep_files(stores, 0.01))
        for _ in range(200):
            if await files.get(old.id, "alice") is None:
                break
            await asyncio.sleep(0.01)
        job.cancel()
        assert await files.get(old.id, "alice") is None and not (tmp_path / "db" / "files" / old.id).exists()
        assert await files.get(kept.id, "alice") is not None
    finally:
        await stores.close()
