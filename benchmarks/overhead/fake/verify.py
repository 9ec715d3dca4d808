"""``--verify``: replay the recordings against the fake and diff status, headers and bodies.

Only ids, timestamps, ``content-length`` and ``timings`` values are ignored; key order counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.overhead.fake.script import Settings
from benchmarks.overhead.fake.server import FakeUpstream

ROOT = Path(__file__).resolve().parents[3]
WIRE = ROOT / "tests" / "fixtures" / "wire"


VERIFY_CASES = [
    "llamacpp/01a_get_health.json", "llamacpp/01b_get_props.json",
    "llamacpp/02_completion_tokenids_nonstream.json", "llamacpp/03a_completion_tokenids_stream.json",
    "llamacpp/04c_completion_tokenids_nonstream_n_predict3.json",
    "llamacpp/04d_completion_tokenids_stream_n_predict3.json",
    "llamacpp/06a_tokenize_parse_special_true.json",
    "llamacpp/06c_tokenize_parse_special_true_with_pieces.json",
    "vllm/01a_get_v1_models.json", "vllm/01b_get_health.json", "vllm/07a_chat_nonstream.json",
    "vllm/07b_chat_stream.json", "vllm/07c_chat_stream_usage_no_skip_special.json",
]
VOLATILE = {"id", "created", "date", "content-length"}


def _normalize(value: Any) -> Any:
    """Mask what differs between two runs of the same server (ids, clocks, timing values)."""
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE else sorted(v) if k == "timings" and isinstance(v, dict)
                    else _normalize(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _body_events(text: str, sse: bool) -> list[Any]:
    if not sse:
        try:
            return [_normalize(json.loads(text))] if text else []
        except json.JSONDecodeError:
            return [text]
    out: list[Any] = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(data if data == "[DONE]" else _normalize(json.loads(data)))
    return out


async def verify(wire: Path = WIRE) -> int:
    """Replay ``VERIFY_CASES``; print one line per case; the number of mismatches."""
    import httpx

    upstream = FakeUpstream(Settings(tokens=7, n_ctx=2048, chat_script="harmony", slots=1))
    urls = await upstream.start()
    failures = 0
    try:
        async with httpx.AsyncClient() as client:
            for case in VERIFY_CASES:
                rec = json.loads((wire / case).read_text())
                base = urls["llamacpp" if case.startswith("llamacpp") else "openai"]
                req = rec["request"]
                headers = {"content-type": "application/json"} if req["body_text"] is not None else {}
                response = await client.request(req["method"], base + req["path"], headers=headers,
                                                content=(req["body_text"] or "").encode() or None)
                want = rec["response"]
                sse = "text/event-stream" in response.headers.get("content-type", "")
                got_headers = [(k.decode(), "<volatile>" if k.lower().decode() in VOLATILE else v.decode())
                               for k, v in response.headers.raw]
                want_headers = [(k, "<volatile>" if k.lower() in VOLATILE else v)
                                for k, v in want["headers"]]
                problems = []
                if response.status_code != want["status"]:
                    problems.append(f"status {response.status_code} != {want['status']}")
                if got_headers != want_headers:
                    problems.append(f"headers {got_headers} != {want_headers}")
                got = _body_events(response.text, sse)
                expected = _body_events(rec["derived"]["body_text"], sse)
                if json.dumps(got) != json.dumps(expected):  # key order counts too
                    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
                        if json.dumps(g) != json.dumps(e):
                            problems.append(f"event {i}: {json.dumps(g)[:400]} != {json.dumps(e)[:400]}")
                            break
                    if len(got) != len(expected):
                        problems.append(f"{len(got)} events != {len(expected)}")
                failures += bool(problems)
                details = "".join(f"\n     {p}" for p in problems)
                print(f"{'DIFF' if problems else 'ok  '} {case}{details}")
    finally:
        await upstream.close()
    return failures
