"""``token_ids``: a stream event's token ids are a list of non-negative ints below
``MAX_TOKEN_ID``; anything else is the backend's protocol error (one-token lists included,
which take a shorter path)."""

from __future__ import annotations

import pytest

from adapters.base import MAX_TOKEN_ID, token_ids
from app.core.errors import UpstreamError


@pytest.mark.parametrize(("value", "expected"), [
    (None, ()), ([], ()), ([0], (0,)), ([7], (7,)), ([MAX_TOKEN_ID - 1], (MAX_TOKEN_ID - 1,)),
    ([1, 2, 3], (1, 2, 3)),
])
def test_valid(value: object, expected: tuple[int, ...]) -> None:
    assert token_ids(value, "b") == expected


@pytest.mark.parametrize("value", [
    [True], [False], [1.0], ["1"], [None], [-1], [MAX_TOKEN_ID], [[1]], (1,), 1, "1", {"a": 1},
    [1, True], [1, -2], [1, "2"],
])
def test_invalid(value: object) -> None:
    with pytest.raises(UpstreamError) as err:
        token_ids(value, "b")
    assert err.value.code == "invalid_upstream_tokens"
