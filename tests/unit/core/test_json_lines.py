"""The JSON-lines connection the machine services share (app/core/json_lines.py): lines split
across reads and capped, handled in order, a malformed or over-long one closing the connection
(the lines after it not handled), what one read's lines send written at once, answers matched
to requests by id, a closed connection failing its requests; the service socket's file; a
worker's connection made once and made again when it closes, the service away told once."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.core.json_lines import (
    Dial,
    LineClient,
    LinePeer,
    close_unix,
    count,
    listen_unix,
    split_lines,
    text,
)

pytestmark = pytest.mark.timeout(30)


class Wire(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


class Recorder(LinePeer):
    """Records each message; ``["echo", x]`` sends ``[x]`` back, ``["boom"]`` is rejected."""

    max_line = 100
    name = "test peer"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def handle(self, msg: list[Any]) -> None:
        if msg[0] == "boom":
            raise KeyError(msg[0])
        self.seen.append(msg)
        if msg[0] == "echo":
            self.send_message([msg[1]])


def peer() -> tuple[Recorder, Wire]:
    made, wire = Recorder(), Wire()
    made.connection_made(wire)
    return made, wire


def test_lines_are_split_across_reads_and_capped() -> None:
    buffer = bytearray()
    assert split_lines(buffer, b'["a"', 100) == []
    assert split_lines(buffer, b',1]\n["b"]\n["c', 100) == [b'["a",1]', b'["b"]']
    assert bytes(buffer) == b'["c'
    assert split_lines(buffer, b"]\n", 100) == [b'["c]']
    assert buffer == b""
    assert split_lines(buffer, b"[1]\n[2]\n", 100) == [b"[1]", b"[2]"] and buffer == b""
    assert split_lines(buffer, b"x" * 60, 100) == []
    assert split_lines(buffer, b"x" * 60, 100) is None  # 120 bytes and no end yet
    assert split_lines(bytearray(), b"[1]\n" + b"y" * 101, 100) is None


def test_lines_are_handled_in_order_and_one_reads_answers_go_in_one_write() -> None:
    made, wire = peer()
    made.data_received(b'["echo", 1]\n\n["x"]\n["echo"')
    made.data_received(b', 2]\n["echo", 3]\n')
    assert made.seen == [["echo", 1], ["x"], ["echo", 2], ["echo", 3]]
    assert wire.writes == [b"[1]\n", b"[2]\n[3]\n"] and not wire.aborted
    made.send(b"[4]\n")  # outside a read: written at once
    assert wire.writes[-1] == b"[4]\n"


@pytest.mark.parametrize("bad", [b"not json", b'["boom"]', b"[]", b"5"])
def test_a_malformed_line_closes_the_connection_and_nothing_after_it_is_handled(
        bad: bytes, caplog: pytest.LogCaptureFixture) -> None:
    made, wire = peer()
    with caplog.at_level(logging.WARNING, logger="ocm_gateway"):
        made.data_received(b'["echo", 1]\n' + bad + b'\n["echo", 2]\n')
    assert wire.aborted and made.seen == [["echo", 1]]
    assert wire.writes == []  # the connection is cut: nothing more is sent on it
    assert "test peer: a malformed line" in caplog.text
    made.send_message(["late"])
    assert wire.writes == []


def test_an_unfinished_line_over_the_bound_closes_the_connection() -> None:
    made, wire = peer()
    made.data_received(b'["echo", 1]\n' + b"z" * 60)
    assert not wire.aborted and wire.writes == [b"[1]\n"]
    made.data_received(b"z" * 60)  # 120 bytes, no end in sight
    assert wire.aborted


class Client(LineClient):
    name = "test client"

    def __init__(self) -> None:
        super().__init__()
        self.heard_lines: list[Any] = []

    def heard(self, msg: list[Any]) -> None:
        if msg[0] != "push":
            super().heard(msg)
        self.heard_lines.append(msg)


async def test_answers_are_matched_by_id_in_any_order_and_other_lines_are_heard() -> None:
    client, wire = Client(), Wire()
    client.connection_made(wire)
    first = asyncio.ensure_future(client.request(["ask", 1], 1, 5))
    second = asyncio.ensure_future(client.request(orjson.dumps(["ask", 2]), 2, 5))
    await asyncio.sleep(0)
    assert wire.writes == [b'["ask",1]\n', b'["ask",2]\n']
    client.data_received(b'[2,"two"]\n["push",7]\n[true,"not an answer"]\n')
    assert await second == [2, "two"] and not first.done()
    assert client.heard_lines == [["push", 7]] and wire.aborted  # a bool is no id: not heard either
    client.connection_lost(None)
    with pytest.raises(ConnectionResetError):
        await first
    assert not client.alive and client.waiting == {}


async def test_a_request_gives_up_after_its_time_and_forgets_its_id() -> None:
    client, wire = Client(), Wire()
    client.connection_made(wire)
    with pytest.raises(TimeoutError):
        await client.request(["ask"], 9, 0.05)
    assert client.waiting == {} and client.alive
    client.data_received(b"[9,\"late\"]\n")  # a late answer is dropped
    assert not wire.aborted


def test_fields_are_checked() -> None:
    assert text("a") == "a" and count(0) == 0 and count(7) == 7
    for bad_text in (1, None, b"a"):
        with pytest.raises(TypeError):
            text(bad_text)
    for bad_count in (-1, True, 1.0, "1", None):
        with pytest.raises(TypeError):
            count(bad_count)


class Echo(LinePeer):
    def handle(self, msg: list[Any]) -> None:
        self.send_message([msg[0], "ok"])


@pytest.fixture
def stale(tmp_path: Path) -> str:
    path = tmp_path / "s.sock"
    path.write_text("left by a killed service")
    return str(path)


def mode(path: str) -> int | None:
    return stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None


async def test_a_service_socket_replaces_a_stale_file_is_private_and_is_removed(stale: str) -> None:
    server = await listen_unix(stale, Echo)
    assert mode(stale) == 0o600
    _, client = await asyncio.get_running_loop().create_unix_connection(Client, stale)
    assert await client.request([3], 3, 5) == [3, "ok"]
    client.close()
    close_unix(server, stale)
    assert mode(stale) is None
    close_unix(None, stale)  # nothing opened: nothing to do
    close_unix(server, stale)  # already removed


async def until(check: Any, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not in time")


async def test_a_dial_makes_one_connection_and_makes_it_again_when_it_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "d.sock")
    dial = Dial(path, Client, 1.0)
    with pytest.raises(OSError):
        await dial()  # no service yet
    ups: list[int] = []
    downs: list[Exception] = []
    keeper = asyncio.ensure_future(dial.keep(up=lambda: ups.append(1), down=downs.append))
    await asyncio.sleep(0.2)
    assert len(downs) == 1 and ups == []  # told once for a run of failures
    served: list[Echo] = []

    def echo() -> Echo:
        served.append(Echo())
        return served[-1]

    server = await listen_unix(path, echo)
    try:
        await until(lambda: ups == [1])
        first = await dial()
        assert await dial() is first and dial.current is first and len(served) == 1
        served[0].close()  # the service drops the connection: made again at once
        await until(lambda: len(ups) == 2 and dial.current is not first)
        assert not first.alive and await (await dial()).request([5], 5, 5) == [5, "ok"]
        assert len(downs) == 1
    finally:
        keeper.cancel()
        close_unix(server, path)
