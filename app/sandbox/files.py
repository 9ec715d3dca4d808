"""A container's files, as the supervisor sees them after a run: what is there, and the
files the run wrote (new or changed), with their contents within a budget.

The code that wrote them is hostile, so the directory is walked with :func:`os.fwalk`
(directory file descriptors, symbolic links never followed: a link to ``/etc`` or to another
container is not a directory here, and a link is never read), and a file is opened relative to
its directory's descriptor with ``O_NOFOLLOW | O_NONBLOCK`` and read only when ``fstat`` says it
is a regular file (a FIFO cannot block the read; a file swapped for a link between the walk and
the read is refused by the kernel).  At most :data:`MAX_WRITTEN` written files are reported; a
file's contents come back only when it fits :data:`MAX_FILE` and what is left of ``budget``;
the others are reported by name and size alone.
"""

from __future__ import annotations

import base64
import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_LISTED = 100  # names in a run's ``files``
MAX_WRITTEN = 16  # written files reported per run
MAX_FILE = 512 * 1024  # the largest file whose contents come back (base64: ~700,000 characters)


@dataclass(frozen=True)
class Written:
    path: str  # relative to the container's directory, with "/"
    size: int
    data: bytes | None  # None: over the budget

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "bytes": self.size}
        if self.data is not None:
            out["data"] = base64.b64encode(self.data).decode("ascii")
        return out


@dataclass(frozen=True)
class Scan:
    stamps: dict[str, tuple[int, int]]  # path → (size, mtime in ns), regular files only
    total: int  # bytes of all of them

    def names(self) -> list[str]:
        return sorted(self.stamps)[:MAX_LISTED]


def scan(root: Path) -> Scan:
    stamps: dict[str, tuple[int, int]] = {}
    total = 0
    for top, _dirs, names, fd in os.fwalk(root, follow_symlinks=False):
        base = os.path.relpath(top, root)
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    rel = name if base == "." else f"{base}/{name}"
                    stamps[rel.replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
                    total += st.st_size
    return Scan(stamps, total)


def _read(root: Path, rel: str, limit: int) -> bytes | None:
    """The file's bytes when it is still a regular file of at most ``limit`` bytes."""
    parts = rel.split("/")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW))
        for part in parts[:-1]:
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], flags, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fds[-1], min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= limit else None
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def written(root: Path, before: dict[str, tuple[int, int]], after: Scan, budget: int) -> list[Written]:
    """The files new or changed since ``before`` (sorted by path), with their contents while
    they fit ``budget`` bytes in all."""
    changed = sorted(p for p, stamp in after.stamps.items() if before.get(p) != stamp)[:MAX_WRITTEN]
    out: list[Written] = []
    for rel in changed:
        size = after.stamps[rel][0]
        limit = min(budget, MAX_FILE)
        data = _read(root, rel, limit) if size <= limit else None
        if data is not None:
            budget -= len(data)
        out.append(Written(rel, size if data is None else len(data), data))
    return out
