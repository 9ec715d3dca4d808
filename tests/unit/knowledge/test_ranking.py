"""app/knowledge/ranking.py: ranker names, ranking_options validation, reciprocal rank fusion
and the [0, 1] scores each ranker reports."""

from __future__ import annotations

import math

import pytest

from app.core.errors import InvalidRequest
from app.knowledge.ranking import RRF_K, RankingOptions, combine, depth, parse_ranking_options, ranker_of, rrf


def test_ranker_names() -> None:
    assert [ranker_of(n) for n in ("auto", "default-2024-11-15", "hybrid", "none", "vector", "keyword")] == [
        "auto",
        "auto",
        "hybrid",
        "none",
        "vector",
        "keyword",
    ]
    with pytest.raises(InvalidRequest) as caught:
        ranker_of("bm42")
    assert caught.value.param == "ranking_options.ranker"


def test_parse_ranking_options() -> None:
    assert parse_ranking_options(None) == RankingOptions()
    assert parse_ranking_options({"ranker": "none", "score_threshold": 0.4}) == RankingOptions("none", 0.4)
    assert parse_ranking_options(
        {"ranker": None, "hybrid_search": {"embedding_weight": 2, "text_weight": 0}}
    ) == RankingOptions("auto", 0.0, 2.0, 0.0)
    for bad, param in [
        ([], "ranking_options"),
        ({"ranker": 3}, "ranking_options.ranker"),
        ({"score_threshold": 1.5}, "ranking_options.score_threshold"),
        ({"score_threshold": "0.1"}, "ranking_options.score_threshold"),
        ({"score_threshold": True}, "ranking_options.score_threshold"),
        ({"hybrid_search": {"embedding_weight": -1}}, "ranking_options.hybrid_search.embedding_weight"),
        ({"hybrid_search": {"embedding_weight": 0, "text_weight": 0}}, "ranking_options.hybrid_search"),
        ({"hybrid_search": 1}, "ranking_options.hybrid_search"),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            parse_ranking_options(bad)
        assert caught.value.param == param and caught.value.status == 400


def test_rrf_sums_reciprocal_ranks_normalised() -> None:
    fused = dict(rrf([(["a", "b", "c"], 1.0), (["b", "d"], 1.0)]))
    best = 2 / (RRF_K + 1)
    assert math.isclose(fused["b"], (1 / (RRF_K + 2) + 1 / (RRF_K + 1)) / best)
    assert math.isclose(fused["a"], (1 / (RRF_K + 1)) / best) and math.isclose(fused["a"], 0.5)
    assert [k for k, _ in rrf([(["a", "b", "c"], 1.0), (["b", "d"], 1.0)])] == ["b", "a", "d", "c"]
    assert rrf([(["x"], 1.0), (["x"], 1.0)]) == [("x", 1.0)]
    assert rrf([]) == [] and rrf([(["a"], 0.0)]) == []
    weighted = rrf([(["a"], 3.0), (["b"], 1.0)])
    assert [k for k, _ in weighted] == ["a", "b"] and math.isclose(weighted[0][1], 0.75)


def test_combine_per_ranker() -> None:
    vector = [("v1", 0.9), ("k1", 0.5), ("v2", -0.2)]
    keyword = [("k1", 12.0), ("k2", 3.0)]
    assert combine(vector, None, ranker="none", limit=5) == [("v1", 0.9), ("k1", 0.5), ("v2", 0.0)]
    assert combine(None, keyword, ranker="keyword", limit=5) == [("k1", 1.0), ("k2", 0.25)]
    assert combine(None, keyword, ranker="auto", limit=5) == [("k1", 1.0), ("k2", 0.25)]  # no vector
    fused = combine(vector, keyword, ranker="auto", limit=3)
    assert [k for k, _ in fused] == ["k1", "v1", "k2"] and fused[0][1] > fused[1][1] > fused[2][1] > 0
    assert all(0 <= s <= 1 for _, s in fused)
    assert [k for k, _ in combine(vector, keyword, ranker="hybrid", limit=5, score_threshold=0.495)] == [
        "k1",
        "v1",
    ]
    assert [k for k, _ in combine(vector, keyword, ranker="auto", limit=5, embedding_weight=0.0)] == [
        "k1",
        "k2",
    ]
    assert combine(vector, [], ranker="auto", limit=1) == [("v1", 0.5)]
    assert combine([], [], ranker="auto", limit=3) == []


def test_depth_bounds() -> None:
    assert depth(1) == 50 and depth(20) == 80 and depth(50) == 200 and depth(500) == 200
