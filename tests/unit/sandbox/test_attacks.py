"""What a hostile model writes for the code interpreter, against the real sandbox service
(``ocm-gateway sandbox`` in its own process, bubblewrap from Debian): each attack of issue 27
item 4 is contained, the service keeps serving, and state lives across the runs of one
container.  The service runs with small limits (3 s wall, 128 MB, 16 processes) so the tests
are quick; the defaults are larger (``app/sandbox/isolate.py``)."""

from __future__ import annotations

import base64
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.process import Running
from tests.support.sandbox import TOKEN, sandbox_service

pytestmark = pytest.mark.timeout(120)
SECRET = "s3cr3t-gateway-token"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    tmp = tmp_path_factory.mktemp("sandbox")
    (tmp / "gateway.toml").write_text(f'[auth]\nkeys = [{{key = "{SECRET}"}}]\n')  # the gateway's config
    env = {**os.environ, "OCM_GATEWAY_SECRET": SECRET}
    with sandbox_service("--wall-seconds", "3", "--memory-mb", "128", "--processes", "16",
                         "--output-chars", "1000", "--disk-mb", "20", env=env) as running:
        yield running, tmp


def run(sandbox: tuple[Running, Path], code: str, cid: str = "c1") -> dict[str, Any]:
    r = httpx.post(f"{sandbox[0].url}/v1/containers/{cid}/run", json={"code": code},
                   headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_state_lives_across_runs(sandbox: tuple[Running, Path]) -> None:
    assert run(sandbox, "print(6*7)")["output"] == "42\n"
    assert run(sandbox, "x = 21")["output"] == ""
    assert run(sandbox, "x * 2")["output"] == "42\n"
    assert run(sandbox, "open('notes.txt', 'w').write('hi')")["files"] == ["notes.txt"]
    assert run(sandbox, "open('notes.txt').read()")["output"] == "'hi'\n"
    assert run(sandbox, "x", cid="other")["error"] == "NameError: name 'x' is not defined"  # its own


def test_infinite_loop(sandbox: tuple[Running, Path]) -> None:
    out = run(sandbox, "y = 1\nwhile True: pass", cid="loop")
    assert out["restarted"] and "longer than 3 s" in out["error"]
    assert run(sandbox, "print('alive')", cid="loop")["output"] == "alive\n"  # a fresh interpreter


def test_fork_bomb(sandbox: tuple[Running, Path]) -> None:
    out = run(sandbox, "import os\nwhile True:\n    os.fork()", cid="fork")
    assert out["error"] is not None  # fork fails at the process limit, or the run is stopped
    alive = ("import os\nlen([p for p in os.listdir('/proc') if p.isdigit()\n"
             "     and 'State:\\tZ' not in open(f'/proc/{p}/status').read()])")
    assert run(sandbox, alive, cid="fork")["output"] == "2\n"  # bwrap's init and the worker: nothing else
    assert run(sandbox, "print('ok')")["output"] == "ok\n"  # other containers are unharmed


def test_memory_bomb(sandbox: tuple[Running, Path]) -> None:
    out = run(sandbox, "b = bytearray(1024 * 1024 * 1024)", cid="mem")
    assert "MemoryError" in (out["error"] or "")
    out = run(sandbox, "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))", cid="mem")
    assert out["error"] is not None
    assert run(sandbox, "print('ok')", cid="mem")["output"] == "ok\n"


def test_huge_output(sandbox: tuple[Running, Path]) -> None:
    out = run(sandbox, "print('x' * 10_000_000)", cid="big")
    assert len(out["output"]) == 1000 and out["truncated"] == 10_000_001 - 1000
    out = run(sandbox, "import os\nos.write(1, b'y' * 1_000_000)\nos.write(2, b'z' * 1_000_000)", cid="big")
    assert out["error"] is None and "y" not in out["output"]  # raw fds go nowhere


def test_the_gateways_config_and_environment_are_invisible(sandbox: tuple[Running, Path]) -> None:
    _, tmp = sandbox
    out = run(sandbox, f"open({str(tmp / 'gateway.toml')!r}).read()", cid="spy")
    assert "FileNotFoundError" in out["error"]
    out = run(sandbox, "import os; dict(os.environ)", cid="spy")
    assert SECRET not in out["output"] and "OCM_GATEWAY_SECRET" not in out["output"]
    out = run(sandbox, "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                       "        print(open(f'/proc/{p}/environ', 'rb').read())", cid="spy")
    assert SECRET not in out["output"]
    out = run(sandbox, "import os; sorted(os.listdir('/'))", cid="spy")
    assert "root" not in out["output"] and "etc" not in out["output"] and "home" not in out["output"]
    out = run(sandbox, "import os; os.listdir('..')", cid="spy")  # the other containers' root
    assert "c1" not in out["output"]


def test_no_network(sandbox: tuple[Running, Path]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        out = run(sandbox, f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)", cid="net")
        assert "ConnectionRefusedError" in out["error"]  # its loopback is its own
        out = run(sandbox, "import socket; socket.create_connection(('8.8.8.8', 53), 2)", cid="net")
        assert "unreachable" in out["error"]
        out = run(sandbox, "import socket; socket.getaddrinfo('example.com', 80)", cid="net")
        assert out["error"] is not None
    finally:
        listener.close()


def test_writing_outside_its_directory(sandbox: tuple[Running, Path]) -> None:
    _, tmp = sandbox
    for target in ("/usr/evil", "../escape", "/evil", str(tmp / "evil"), "/opt/ocm/worker.py"):
        out = run(sandbox, f"open({target!r}, 'w').write('x')", cid="write")
        assert out["error"] is not None, target
    out = run(sandbox, "open('/tmp/scratch', 'w').write('x')", cid="write")  # its own tmpfs
    assert out["error"] is None and not Path("/tmp/scratch").exists()
    assert not (tmp / "evil").exists()


def test_disk_bomb(sandbox: tuple[Running, Path]) -> None:
    out = run(sandbox, "open('big', 'wb').write(b'0' * (64 * 1024 * 1024))", cid="disk")
    assert out["error"] is not None  # past the file size limit (16 MB)
    fill = "for i in range(3):\n    open(f'f{i}', 'wb').write(b'0' * (15 * 1024 * 1024))"
    out = run(sandbox, fill, cid="disk")
    assert "more than 20 MB" in out["error"] and out["files"] == []
    tmpfs = "for i in range(3):\n    open(f'/tmp/f{i}', 'wb').write(b'0' * (15 * 1024 * 1024))"
    assert "No space left" in run(sandbox, tmpfs, cid="disk")["error"]  # /tmp is a 20 MB tmpfs


def test_written_files_come_back_but_never_through_a_link(sandbox: tuple[Running, Path]) -> None:
    _, tmp = sandbox
    code = ("open('plot.png', 'wb').write(b'\\x89PNG-bytes')\n"
            "import os; os.makedirs('d', exist_ok=True); open('d/a.csv', 'w').write('a,b')")
    out = run(sandbox, code, cid="w")
    got = {w["path"]: (w["bytes"], base64.b64decode(w["data"])) for w in out["written"]}
    assert got == {"plot.png": (10, b"\x89PNG-bytes"), "d/a.csv": (3, b"a,b")}
    assert run(sandbox, "x = 1", cid="w")["written"] == []  # unchanged files are not sent again
    # links made inside point at paths the supervisor would resolve outside: never followed
    link = (f"import os\nos.symlink({str(tmp / 'gateway.toml')!r}, 'config.png')\n"
            "os.symlink('/etc', 'etc')\nos.mkfifo('pipe')")
    out = run(sandbox, link, cid="w")
    assert out["error"] is None and out["written"] == []
    assert SECRET not in str(out) and "config.png" not in out["files"]


def test_bad_requests(sandbox: tuple[Running, Path]) -> None:
    url = sandbox[0].url
    assert httpx.post(f"{url}/v1/containers/c1/run", json={"code": "1"}).status_code == 401
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{url}/v1/containers/c1/run", json={"x": 1}, headers=auth).status_code == 400
    bad_id = httpx.post(f"{url}/v1/containers/..%2Fx/run", json={"code": "1"}, headers=auth)
    assert bad_id.status_code in (400, 404)
    assert httpx.delete(f"{url}/v1/containers/nope", headers=auth).status_code == 404
    run(sandbox, "1", cid="gone")
    assert httpx.delete(f"{url}/v1/containers/gone", headers=auth).status_code == 204


def test_a_caller_that_leaves_stops_its_run(sandbox: tuple[Running, Path]) -> None:
    code = "import time\ntime.sleep(2)\nopen('done', 'w').write('x')"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{sandbox[0].url}/v1/containers/leave/run", json={"code": code},
                   headers={"authorization": f"Bearer {TOKEN}"}, timeout=0.5)
    time.sleep(2.5)
    out = run(sandbox, "import os; os.path.exists('done')", cid="leave")
    assert out["output"] == "False\n" and out["restarted"]  # killed when the caller left
