"""``benchmarks.loadprofile``: py-spy's raw stacks grouped by the frame nearest the leaf that
names a group, the event loop only as the fallback."""

from __future__ import annotations

from pathlib import Path

from benchmarks.loadprofile import FALLBACK, OFF_LOOP, group_of, grouped, read_stacks, table

LOOP = "run_forever (asyncio/base_events.py:607);_run_once (asyncio/base_events.py:1922)"
RUN = "_run (asyncio/events.py:80)"
ASGI = "run_asgi (uvicorn/protocols/http/httptools_impl.py:416)"
OBSERVE = "__call__ (app/http/observe.py:120)"


def _frames(*parts: str) -> list[str]:
    return ";".join(parts).split(";")


def test_the_frame_nearest_the_leaf_decides() -> None:
    connect = _frames(LOOP, RUN, ASGI, OBSERVE, "send (adapters/aiohttp_transport.py:140)",
               "_create_direct_connection (aiohttp/connector.py:1300)",
               "start_connection (aiohappyeyeballs/impl.py:80)",
               "sock_connect (asyncio/selector_events.py:630)")
    assert group_of(connect) == "upstream connect (a new TCP connection)"
    access_log = _frames(LOOP, RUN, ASGI, OBSERVE, "dumps (json/__init__.py:231)")
    assert group_of(access_log) == "logging, access log, metrics"
    sse = _frames(LOOP, RUN, ASGI, OBSERVE, "__call__ (app/http/sse_send.py:90)",
                  "send (uvicorn/protocols/http/httptools_impl.py:508)",
                  "write (asyncio/selector_events.py:1060)")
    assert group_of(sse) == "SSE send (response writes)"
    parse = _frames(LOOP, RUN, "data_received (app/http/server.py:200)",
                    "data_received (uvicorn/protocols/http/httptools_impl.py:160)")
    assert group_of(parse) == "accept + HTTP parse"
    assert group_of(_frames(LOOP, "select (selectors.py:468)")) == FALLBACK[0]
    assert group_of(_frames(LOOP, "<module> (x.py:1)")) == "other"
    thread = ["_bootstrap (threading.py:995)", "_connection_worker_thread (aiosqlite/core.py:59)",
              "validate (app/http/body.py:50)"]
    assert group_of(thread) == OFF_LOOP  # not the event loop's CPU, whatever it runs


def test_files_are_read_and_tabled_per_worker(tmp_path: Path) -> None:
    one, two = tmp_path / "burst-w1.txt", tmp_path / "burst-w2.txt"
    one.write_text(f"{LOOP};{RUN};{ASGI};render (app/formats/harmony/render.py:10) 30\n"
                   f"{LOOP};select (selectors.py:468) 10\n")
    two.write_text(f"{LOOP};{RUN};{ASGI};validate (app/http/body.py:50) 5\nbroken line\n"
                   "_bootstrap (threading.py:995);_dump (probe.py:9) 7\n")
    assert read_stacks(two)[0] == (_frames(LOOP, RUN, ASGI, "validate (app/http/body.py:50)"), 5)
    groups, others = grouped(read_stacks(one))
    assert groups == {"render (prompt format)": 30, FALLBACK[0]: 10} and not others
    text = table([one, two])
    assert "| render (prompt format) | 30 | 0 | 30 | 66.7 % |" in text
    assert "| body read + validation | 0 | 5 | 5 | 11.1 % |" in text
    assert "| **the event loop's samples** | 40 | 5 | 45 | 100 % |" in text
    assert f"| {OFF_LOOP} | 0 | 7 | 7 | – |" in text
