"""The keyword half of a search, shared by both indexes: which words a query looks for, which of
them are worth ranking by, and their BM25 weight, all from the searched vector stores' own
statistics.

* :func:`keyword_terms`: the query's words, lower-cased, unique, common English stop words
  dropped (unless that leaves none), at most :data:`MAX_QUERY_WORDS`.  Each is later quoted:
  no user text is ever query syntax.
* :func:`selective`: given each word's document frequency (``df``: how many chunks of the
  searched stores hold it) and the stores' chunk count, the words kept — a word found in no
  chunk is dropped, and so is a word in more than :data:`COMMON_SHARE` of the chunks (and more
  than :data:`COMMON_MIN`) unless the query has no other (then its rarest word is kept): such a
  word weighs little in BM25 and is what costs most (every chunk holding it is ranked).
* :func:`idf`: BM25's inverse document frequency.

**Tenants**: the counts these functions are given are those of the searched stores only (the
caller's), never of the whole index, so nothing another key uploads moves a score or an order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

_WORD = re.compile(r"\w+")
MAX_QUERY_WORDS = 64
COMMON_SHARE, COMMON_MIN = 0.05, 1000  # a word in more chunks than both is left out of the query
_STOP = ("a an and are as at be but by can do does for from has have how i if in into is it its of on "
         "or that the their there these this to was were what when where which who why will with you your")
STOP_WORDS = frozenset(_STOP.split(" "))


def keyword_terms(text: str) -> list[str]:
    """The words a keyword search looks for: lower-cased, unique, stop words dropped (unless
    that leaves none), at most :data:`MAX_QUERY_WORDS`."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    kept = [w for w in words if w not in STOP_WORDS] or words
    return kept[:MAX_QUERY_WORDS]


def selective(df: Mapping[str, int], total: int) -> list[str]:
    """The words (in the query's order) a keyword ranking uses, given their document
    frequencies ``df`` among ``total`` chunks."""
    found = [t for t, n in df.items() if n > 0]
    common = max(COMMON_MIN, COMMON_SHARE * total)
    return [t for t in found if df[t] <= common] or sorted(found, key=df.__getitem__)[:1]


def idf(df: int, total: int) -> float:
    """BM25's inverse document frequency of a word in ``df`` of ``total`` chunks."""
    total = max(total, df, 1)
    return math.log(1 + (total - df + 0.5) / (df + 0.5))
