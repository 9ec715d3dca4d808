"""``ocm-gateway serve --workers N|auto``: how many worker processes, and why.

:func:`parse_workers` is the option's argparse type: a positive integer or ``auto``.
:func:`requested` picks the flag, else ``OCMGW_WORKERS``, else the config's top-level ``workers``
key, else 1 (the built-in default).  :func:`choose` turns it into a count and a one-line
reason for the log.  ``auto`` is the
number of CPUs this process may run on (:func:`available_cpus`: ``os.sched_getaffinity``,
capped by the cgroup's CPU quota, ``/sys/fs/cgroup/cpu.max`` on cgroup v2 or
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` on v1, rounded up), except 1 when the workers
could not share their state: the store is ``:memory:`` (each process would have its own),
or ``--embedded`` (one in-process llama.cpp).  An explicit number is used as given (the
``--embedded`` check is the caller's).

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


def requested(flag: int | str | None, configured: int | str, *, explicit: bool = True,
              env: Mapping[str, str] | None = None) -> tuple[int | str, str]:
    """What was asked for and where: the flag, else ``OCMGW_WORKERS``, else the config file's
    ``workers`` (``configured`` is the loaded config's value, the variable already applied;
    ``explicit``: the file or the variable set it), else the default (1)."""
    env = os.environ if env is None else env
    if flag is not None:
        return flag, "--workers"
    if env.get("OCMGW_WORKERS", "").strip():
        return configured, "OCMGW_WORKERS"
    if explicit:
        return configured, "config workers"
    return 1, "the default"


def choose(requested: int | str, *, store_path: str, store_url: str | None, embedded: bool,
           cpus: tuple[int, str] | None = None, source: str = "--workers") -> tuple[int, str]:
    """(worker count, reason) for ``requested`` (from ``source``)."""
    if requested != AUTO:
        return int(requested), source
    if embedded:
        return 1, "--embedded runs one in-process llama.cpp"
    if store_url is None and store_path == ":memory:":
        return 1, "the store is :memory:, which worker processes cannot share"
    count, source = cpus if cpus is not None else available_cpus()
    return count, source


def raise_open_files(need: int) -> tuple[int, int]:
    """Raise the soft open-files limit to ``need`` (at most the hard limit; never lowered);
    the (soft, hard) limits after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)
