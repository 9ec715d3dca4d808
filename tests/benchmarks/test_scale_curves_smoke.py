"""The scaling benchmark runs end to end on its tiny preset, and its four axes report what they
say: the prompt really grows along the chain, every point has a CPU figure."""

from __future__ import annotations

import pytest

from benchmarks.scale_curves import POINTS, main

pytestmark = pytest.mark.timeout(300)


async def test_scale_curves_tiny_preset() -> None:
    result = await main("tiny")
    assert [r["prompt_tokens"] for r in result["prompt_size"]] == POINTS["tiny"]["prompt_size"]
    assert [r["tools"] for r in result["tool_count"]] == [0, 5]
    chain = result["chain_depth"]
    assert [r["depth"] for r in chain] == [1, 3]
    assert chain[1]["prompt_tokens"] > chain[0]["prompt_tokens"] > 0  # each turn re-renders the chain
    assert [r["streams"] for r in result["concurrent_streams"]] == [1, 5]
    for rows in result.values():
        assert all(value > 0 for row in rows for key, value in row.items() if key.startswith("cpu_ms")
                   and value is not None)
