"""How one sandbox container's interpreter is started: the isolation and the limits.

The command is ``prlimit <limits> -- bwrap <namespaces and mounts> -- python3 -I worker.py FD``,
run as the container's own uid when the service runs as root:

* **bubblewrap** (``bwrap``): new user, PID, network, IPC, UTS and cgroup namespaces
  (``--unshare-all``: the network namespace has only a loopback interface, so no address
  outside is reachable); the environment cleared; a filesystem of its own made of read-only
  binds of ``/usr`` (and the ``/bin``, ``/lib*``, ``/sbin`` links) and the interpreter's
  prefix, a fresh ``/proc``, ``/dev`` and ``/tmp`` (a tmpfs of ``disk_mb``), and the
  container's working directory at ``/work``, its only writable place on disk; the root
  itself is remounted read-only.  Nothing else of the host
  (``/etc``, ``/root``, the gateway's config, other containers) is visible.
  ``--die-with-parent`` and the PID namespace: killing bwrap kills every process inside.
* **rlimits** (``prlimit``): CPU seconds over the interpreter's life, address space, processes
  (per uid: each container has its own uid when the service is root, so one container's fork
  bomb cannot starve another), open files, file size, no core files.
* Wall time per run, output size and disk use are enforced by the supervisor
  (:mod:`app.sandbox.containers`).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

WORKER = Path(__file__).with_name("worker.py")


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 60  # per container: the interpreter's whole life
    memory_mb: int = 512  # address space of each process
    processes: int = 32  # per container uid (only when the service runs as root)
    open_files: int = 64
    file_mb: int = 16  # largest file a run may write
    disk_mb: int = 100  # the container's directory, checked after every run
    wall_seconds: float = 30.0  # one run
    output_chars: int = 20_000  # one run's output as returned
    files_kb: int = 2048  # contents of the files one run wrote, as returned (the rest: names, sizes)


def find_bwrap() -> str | None:
    """``bwrap`` on PATH (Debian: ``apt install bubblewrap``)."""
    return shutil.which("bwrap")


def find_python() -> str:
    """An interpreter under /usr (visible inside the sandbox): Debian's, the python image's."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return str(Path(sys.executable).resolve())


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    return args


def command(bwrap: str, python: str, workdir: Path, limits: Limits, reply_fd: int,
            worker: Path = WORKER) -> list[str]:
    """The argv that starts a container's interpreter (see the module docstring)."""
    prefix = Path(python).resolve().parent.parent
    binds = [] if str(prefix).startswith("/usr") else ["--ro-bind", str(prefix), str(prefix)]
    return [
        "prlimit", f"--cpu={limits.cpu_seconds}", f"--as={limits.memory_mb * 1024 * 1024}",
        f"--nproc={limits.processes}", f"--nofile={limits.open_files}",
        f"--fsize={limits.file_mb * 1024 * 1024}", "--core=0", "--",
        bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--setenv", "HOME", "/work", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--hostname", "sandbox",
        *_system_binds(), *binds,
        "--ro-bind", str(worker), "/opt/ocm/worker.py",
        "--proc", "/proc", "--dev", "/dev", "--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", "/tmp",
        "--bind", str(workdir), "/work", "--chdir", "/work", "--remount-ro", "/",
        "--", python, "-I", "/opt/ocm/worker.py", str(reply_fd),
    ]
