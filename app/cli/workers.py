"""``ocm-gateway serve --workers N|auto``: how many worker processes, and why.

:func:`parse_workers` is the option's argparse type: a positive integer or ``auto``.
:func:`requested` picks the flag, else ``OCMGW_WORKERS``, else the config's top-level ``workers``
key, else ``auto`` (the built-in default).  :func:`choose` turns it into a count and a one-line
reason for the log.  ``auto`` is the
number of CPUs this process may run on (:func:`available_cpus`: ``os.sched_getaffinity``,
capped by the cgroup's CPU quota, ``/sys/fs/cgroup/cpu.max`` on cgroup v2 or
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` on v1, rounded up), except 1 when the workers
could not share their state: the store is ``:memory:`` (each process would have its own),
or ``--embedded`` (one in-process llama.cpp).  ``auto`` is also capped, so a big host does
not start a worker per core for a gateway that needs a few: at most :data:`AUTO_MAX` (8: about
5,000 requests a second at ~1.5 ms of CPU each, far beyond what the GPUs behind one gateway
serve), and at most what the memory allows at :data:`WORKER_MEMORY` per worker after
:data:`SHARED_MEMORY` for the supervisor and the machine's services (:func:`memory_limit`:
the cgroup's ``memory.max`` / ``memory.limit_in_bytes``, else the host's ``MemTotal``; a
container limited to 512 MB gets 1 worker, not one per CPU and an OOM kill).  An explicit
number is used as given (the ``--embedded`` check is the caller's).

:func:`raise_open_files`: every worker holds up to its connection cap of client sockets plus
its upstream pool, more than the common soft limit of 1,024 open files (a 1,000-stream burst
needs ~2,000); the soft limit is raised towards the hard one, as Go's runtime does, and the
caller warns when even the hard limit is below what the configuration can open.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import resource
from collections.abc import Mapping
from pathlib import Path

AUTO = "auto"
CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
AUTO_MAX = 8
MIB = 1 << 20
WORKER_MEMORY = 320 * MIB  # 176 MB idle, 271 MB at 1,000 streams (docs/performance.md)
SHARED_MEMORY = 100 * MIB  # supervisor 62 + the machine's services 22 + the resource tracker 12


def parse_workers(text: str) -> int | str:
    """argparse type of ``--workers``: ``auto`` or an integer ≥ 1."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}")
    return value


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs the cgroup's quota allows (e.g. 1.5), or None without a quota."""
    try:  # cgroup v2: "max 100000" or "150000 100000"
        quota, _, period = (root / "cpu.max").read_text().strip().partition(" ")
        if quota != "max" and int(period or "100000") > 0:
            return int(quota) / int(period or "100000")
        return None
    except (OSError, ValueError):
        pass
    try:  # cgroup v1: -1 means no quota
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def available_cpus(root: Path = CGROUP_ROOT) -> tuple[int, str]:
    """CPUs this process may use, and how that was found."""
    try:
        affinity = len(os.sched_getaffinity(0))
        source = f"{affinity} CPUs in this process's affinity mask"
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
        source = f"{affinity} CPUs"
    quota = cgroup_quota(root)
    if quota is not None and math.ceil(quota) < affinity:
        return max(1, math.ceil(quota)), f"{source}, cgroup CPU quota {quota:g}"
    return max(1, affinity), source


def memory_limit(root: Path = CGROUP_ROOT, meminfo: Path = MEMINFO) -> tuple[int, str] | None:
    """The bytes this process's cgroup may use (else the host's memory), and where that was
    read; None when neither can be read."""
    for name in ("memory.max", "memory/memory.limit_in_bytes"):  # v2, then v1
        try:
            text = (root / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 says "no limit" with a huge number
            return int(text), "cgroup memory limit"
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024, "host memory"
    except (OSError, ValueError, IndexError):
        pass
    return None


def auto_count(cpus: tuple[int, str], memory: tuple[int, str] | None) -> tuple[int, str]:
    """``auto``'s worker count for ``cpus`` and ``memory`` (see the module docstring), with
    the reason."""
    count, source = cpus
    if count > AUTO_MAX:
        count, source = AUTO_MAX, f"{source}, at most {AUTO_MAX} with auto"
    if memory is not None:
        fits = max(1, (memory[0] - SHARED_MEMORY) // WORKER_MEMORY)
        if fits < count:
            count = fits
            source = (f"{source}, {memory[1]} {memory[0] // MIB} MiB allows {fits} at "
                      f"{WORKER_MEMORY // MIB} MiB each")
    return count, source


def requested(flag: int | str | None, configured: int | str, *, explicit: bool = True,
              env: Mapping[str, str] | None = None) -> tuple[int | str, str]:
    """What was asked for and where: the flag, else ``OCMGW_WORKERS``, else the config file's
    ``workers`` (``configured`` is the loaded config's value, the variable already applied;
    ``explicit``: the file or the variable set it), else the default (``auto``)."""
    env = os.environ if env is None else env
    if flag is not None:
        return flag, "--workers"
    if env.get("OCMGW_WORKERS", "").strip():
        return configured, "OCMGW_WORKERS"
    if explicit:
        return configured, "config workers"
    return AUTO, "the default"


def choose(requested: int | str, *, store_path: str, store_url: str | None, embedded: bool,
           cpus: tuple[int, str] | None = None, memory: tuple[int, str] | None = None,
           source: str = "--workers") -> tuple[int, str]:
    """(worker count, reason) for ``requested`` (from ``source``)."""
    if requested != AUTO:
        return int(requested), source
    if embedded:
        return 1, "--embedded runs one in-process llama.cpp"
    if store_url is None and store_path == ":memory:":
        return 1, "the store is :memory:, which worker processes cannot share"
    return auto_count(cpus if cpus is not None else available_cpus(),
                      memory if memory is not None else memory_limit())


def raise_open_files(need: int) -> tuple[int, int]:
    """Raise the soft open-files limit to ``need`` (at most the hard limit; never lowered);
    the (soft, hard) limits after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)
