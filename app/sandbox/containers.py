"""Sandbox containers: one working directory and one interpreter per container id.

A container is created by its first run and lives until it is deleted or idle for
``idle_seconds``; at most ``max_containers`` exist (beyond: :class:`Full`).  Each has a
directory under the service's root (mode 0700, owned by the container's uid when the service
runs as root: uids ``uid_base``, ``uid_base + 1``, ...) and a worker process started lazily by
:mod:`app.sandbox.isolate`.  Runs of one container are serialized.

A run sends the code and waits for the reply at most ``wall_seconds``.  Whatever goes wrong
inside (a timeout, the interpreter killed by a limit, a reply that is not a frame) kills the
interpreter and its process tree, and the run's result says so: the next run starts a fresh
interpreter in the same directory (files stay, variables are gone).  After every run the
directory's size is checked against ``disk_mb``; over it, the directory is emptied.  The
result names the files there and returns those the run wrote (:mod:`app.sandbox.files`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.sandbox import files
from app.sandbox.files import Written
from app.sandbox.isolate import WORKER, Limits, command

log = logging.getLogger("ocm_sandbox")
_MAX_FRAME = 1 << 22


class Full(Exception):
    """No room for another container."""


@dataclass(frozen=True)
class RunResult:
    output: str
    error: str | None = None
    truncated: int = 0  # characters of output not returned
    restarted: bool = False  # the interpreter was lost (its variables with it)
    files: tuple[str, ...] = ()  # the container's files after the run
    written: tuple[Written, ...] = ()  # the files this run created or changed

    def as_json(self) -> dict[str, Any]:
        return {"output": self.output, "error": self.error, "truncated": self.truncated,
                "restarted": self.restarted, "files": list(self.files),
                "written": [w.as_json() for w in self.written]}


@dataclass
class _Worker:
    proc: asyncio.subprocess.Process
    reply: asyncio.StreamReader  # our end of the reply pipe
    pipe: asyncio.BaseTransport

    async def frame(self) -> bytes:
        size = struct.unpack(">I", await self.reply.readexactly(4))[0]
        if size > _MAX_FRAME:
            raise ValueError("reply too large")
        return await self.reply.readexactly(size)

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 5)
        self.pipe.close()


@dataclass
class Container:
    id: str
    path: Path
    uid: int | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    worker: _Worker | None = None
    used: float = field(default_factory=time.monotonic)
    lost: bool = False  # its interpreter was killed outside a run's result (the caller left)
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # its files after the last run


class Containers:
    def __init__(self, root: Path, bwrap: str, python: str, limits: Limits, *, max_containers: int = 32,
                 idle_seconds: float = 1200.0, uid_base: int = 200_000) -> None:
        self.root, self.bwrap, self.python, self.limits = root, bwrap, python, limits
        self.max_containers, self.idle_seconds, self.uid_base = max_containers, idle_seconds, uid_base
        self._containers: dict[str, Container] = {}
        self._as_root = os.geteuid() == 0
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o711)
        if self._as_root:  # the containers' uids must reach their directories
            for parent in root.resolve().parents:
                if not os.stat(parent).st_mode & 0o001:
                    raise PermissionError(f"{parent} is not searchable by other users: the sandbox's "
                                          f"root {root} must be (chmod o+x, or choose another --root)")
        self.worker = root / ".worker.py"  # a copy every container uid can read
        shutil.copyfile(WORKER, self.worker)
        os.chmod(self.worker, 0o644)

    def _uid(self) -> int | None:
        if not self._as_root:
            return None
        taken = {c.uid for c in self._containers.values()}
        free = (self.uid_base + n for n in range(self.max_containers + 1))
        return next(uid for uid in free if uid not in taken)

    def _container(self, cid: str) -> Container:
        found = self._containers.get(cid)
        if found is not None:
            return found
        if len(self._containers) >= self.max_containers:
            raise Full(f"{self.max_containers} containers exist")
        uid = self._uid()
        path = self.root / cid
        path.mkdir(mode=0o700)
        if uid is not None:
            os.chown(path, uid, uid)
        found = self._containers[cid] = Container(cid, path, uid)
        return found

    async def _start(self, c: Container) -> _Worker:
        read, write = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *command(self.bwrap, self.python, c.path, self.limits, write, self.worker),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, pass_fds=(write,), close_fds=True,
                user=c.uid, group=c.uid, extra_groups=[] if c.uid is not None else None,
                start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        reader = asyncio.StreamReader(limit=_MAX_FRAME)
        loop = asyncio.get_running_loop()
        pipe, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                               os.fdopen(read, "rb", 0))
        return _Worker(proc, reader, pipe)

    async def run(self, cid: str, code: str, wall_seconds: float | None = None) -> RunResult:
        c = self._container(cid)
        async with c.lock:
            c.used = time.monotonic()
            restarted, c.lost = c.lost, False
            if c.worker is None or c.worker.proc.returncode is not None:
                restarted = restarted or c.worker is not None
                c.worker = await self._start(c)
            worker = c.worker
            wall = min(wall_seconds or self.limits.wall_seconds, self.limits.wall_seconds)
            request = json.dumps({"code": code, "max_output": self.limits.output_chars}).encode()
            problem: str | None = None
            reply: dict[str, Any] = {}
            try:
                assert worker.proc.stdin is not None
                worker.proc.stdin.write(struct.pack(">I", len(request)) + request)
                await worker.proc.stdin.drain()
                reply = json.loads(await asyncio.wait_for(worker.frame(), wall))
                if not isinstance(reply, dict):
                    raise ValueError("not a reply")
            except TimeoutError:
                problem = f"The run took longer than {wall:g} s and was stopped"
            except (asyncio.IncompleteReadError, ConnectionError, ValueError, OSError):
                problem = "The interpreter ended (a resource limit, or the code exited it)"
            except BaseException:  # cancelled (the client left): the run must not go on
                await worker.kill()
                c.worker, c.lost = None, True
                raise
            if problem is not None:
                await worker.kill()
                c.worker = None
                restarted = True
            after = await asyncio.to_thread(files.scan, c.path)
            if after.total > self.limits.disk_mb * 1024 * 1024:
                await self._wipe(c)
                problem = (f"{problem or ''} The container used more than {self.limits.disk_mb} MB "
                           "of disk and was emptied")
                restarted, after = True, files.Scan({}, 0)
            new = await asyncio.to_thread(files.written, c.path, c.seen, after, self.limits.files_kb * 1024)
            c.seen = after.stamps
            result = RunResult(str(reply.get("output", "")), reply.get("error"),
                               int(reply.get("truncated", 0)), restarted, tuple(after.names()), tuple(new))
            if problem is not None:
                return dataclasses.replace(result, error=problem.strip() + "; its variables are gone.",
                                           truncated=0)
            return result

    async def _wipe(self, c: Container) -> None:
        if c.worker is not None:
            await c.worker.kill()
            c.worker = None
        await asyncio.to_thread(shutil.rmtree, c.path, True)
        c.path.mkdir(mode=0o700, exist_ok=True)
        if c.uid is not None:
            os.chown(c.path, c.uid, c.uid)

    async def delete(self, cid: str) -> bool:
        c = self._containers.pop(cid, None)
        if c is None:
            return False
        if c.worker is not None:  # a run in flight ends now (its reply pipe closes)
            await c.worker.kill()
        async with c.lock:
            await self._wipe(c)
            await asyncio.to_thread(shutil.rmtree, c.path, True)
        return True

    async def expire(self) -> None:
        now = time.monotonic()
        for cid, c in list(self._containers.items()):
            if now - c.used > self.idle_seconds and not c.lock.locked():
                await self.delete(cid)

    async def close(self) -> None:
        for cid in list(self._containers):
            await self.delete(cid)
