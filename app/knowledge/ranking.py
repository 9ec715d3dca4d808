"""Ranking: OpenAI's ``ranking_options`` and how the index turns its vector and keyword
candidate lists into one ranked, scored list (the same for every store and every index).

* **Rankers** (:func:`ranker_of`): ``auto`` (the default), ``default-2024-11-15`` and
  ``hybrid`` fuse the vector and the keyword rankings; ``none`` and ``vector`` are the plain
  vector ranking (OpenAI's ``none`` "disables re-ranking"; here it means no keyword fusion);
  ``keyword`` is full-text only.  A search without a query vector (no embedder answered) is
  ranked by keywords whatever the ranker.
* **Fusion** (:func:`combine`): reciprocal rank fusion, ``sum_r w_r / (k + rank_r)`` with
  ``k`` = :data:`RRF_K` (60) and ranks from 1; the weights are the file_search tool's
  ``hybrid_search`` ``embedding_weight`` / ``text_weight`` (1 and 1 by default).
* **Scores** in [0, 1], higher is better, so ``score_threshold`` means one thing per ranker:
  vector — the cosine similarity clamped to [0, 1]; keyword — the full-text score over the
  best one's (the best match scores 1); fused — the RRF score over the most any chunk could
  get (first in every ranking computed), so a chunk first in both scores 1 and a chunk first in
  only one of two equally weighted rankings 0.5.  Results below ``score_threshold`` are
  dropped; ties keep the vector ranking's order, then the keyword ranking's.
* Several vector stores are ranked together: the index ranks the candidates of all the given
  stores in one list before this fusion, so the stores' results interleave by score.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from app.core.errors import InvalidRequest
from app.knowledge.vectors import Ranker

K = TypeVar("K", bound=Hashable)
RRF_K = 60
RANKER_NAMES: dict[str, Ranker] = {
    "auto": "auto", "default-2024-11-15": "auto", "hybrid": "hybrid",
    "none": "none", "vector": "vector", "keyword": "keyword",
}


def ranker_of(name: Any, param: str = "ranking_options.ranker") -> Ranker:
    """The ranker an API name means (400 naming ``param`` for an unknown one)."""
    if not isinstance(name, str) or name not in RANKER_NAMES:
        raise InvalidRequest(f"Invalid '{param}': one of {', '.join(RANKER_NAMES)} is expected.",
                             param=param, code="invalid_value")
    return RANKER_NAMES[name]


def fuses(ranker: Ranker) -> bool:
    return ranker in ("auto", "hybrid")


def depth(max_num_results: int) -> int:
    """How many candidates each ranking contributes before fusion."""
    return min(max(4 * max_num_results, 50), 200)


@dataclass(frozen=True, slots=True)
class RankingOptions:
    ranker: Ranker = "auto"
    score_threshold: float = 0.0
    embedding_weight: float = 1.0
    text_weight: float = 1.0


def _number(value: Any, param: str, low: float, high: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise InvalidRequest(f"Invalid '{param}': a number {bound} is expected.", param=param,
                             code="invalid_value")
    return float(value)


def parse_ranking_options(obj: Any, param: str = "ranking_options") -> RankingOptions:
    """OpenAI's ``ranking_options`` (``ranker``, ``score_threshold`` in [0, 1], the tool's
    ``hybrid_search`` weights), validated; ``None`` is the defaults."""
    if obj is None:
        return RankingOptions()
    if not isinstance(obj, Mapping):
        raise InvalidRequest(f"Invalid '{param}': an object is expected.", param=param, code="invalid_type")
    ranker = ranker_of(obj["ranker"], f"{param}.ranker") if obj.get("ranker") is not None else "auto"
    threshold = obj.get("score_threshold")
    threshold = 0.0 if threshold is None else _number(threshold, f"{param}.score_threshold", 0.0, 1.0)
    weights = obj.get("hybrid_search")
    vector_w = text_w = 1.0
    if weights is not None:
        if not isinstance(weights, Mapping):
            raise InvalidRequest(f"Invalid '{param}.hybrid_search': an object is expected.",
                                 param=f"{param}.hybrid_search", code="invalid_type")
        vector_w = _number(weights.get("embedding_weight", 1.0), f"{param}.hybrid_search.embedding_weight",
                           0.0, None)
        text_w = _number(weights.get("text_weight", 1.0), f"{param}.hybrid_search.text_weight", 0.0, None)
        if vector_w + text_w <= 0:
            raise InvalidRequest(f"Invalid '{param}.hybrid_search': the weights cannot both be 0.",
                                 param=f"{param}.hybrid_search", code="invalid_value")
    return RankingOptions(ranker, threshold, vector_w, text_w)


def rrf(rankings: Sequence[tuple[Sequence[K], float]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal rank fusion of ``(keys best first, weight)`` rankings, normalised to [0, 1]
    by the most a key could get; best first (ties: first seen first)."""
    total = sum(weight for _keys, weight in rankings)
    if total <= 0:
        return []
    scores: dict[K, float] = {}
    for keys, weight in rankings:
        for rank, key in enumerate(keys, 1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    best = total / (k + 1)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(((key, min(1.0, s / best)) for key, s in scores.items()),
                  key=lambda pair: (-pair[1], order[pair[0]]))


def combine(vector: Sequence[tuple[K, float]] | None, keyword: Sequence[tuple[K, float]] | None, *,
            ranker: Ranker, limit: int, score_threshold: float = 0.0, embedding_weight: float = 1.0,
            text_weight: float = 1.0, k: int = RRF_K) -> list[tuple[K, float]]:
    """The final ``(key, score)`` list, best first, at most ``limit``.

    ``vector``: ``(key, cosine similarity)`` best first, or ``None`` when no vector ranking was
    computed; ``keyword``: ``(key, full-text score, higher better)`` best first, or ``None``.
    """
    if vector is not None and (ranker in ("none", "vector") or keyword is None):
        scored = [(key, min(1.0, max(0.0, float(sim)))) for key, sim in vector]
    elif ranker == "keyword" or vector is None:
        top = max((float(s) for _k, s in keyword or ()), default=0.0)
        scored = [(key, min(1.0, max(0.0, float(s) / top)) if top > 0 else 0.0) for key, s in keyword or ()]
    else:
        assert keyword is not None
        rankings = [([key for key, _s in vector], embedding_weight),
                    ([key for key, _s in keyword], text_weight)]
        scored = rrf([(keys, w) for keys, w in rankings if w > 0], k)
    return [(key, score) for key, score in scored if score >= score_threshold][:limit]
