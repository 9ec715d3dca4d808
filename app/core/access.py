"""Who is asking: the tenant that owns what a request stores, and the models it may use.

Authentication (``app/http/auth.py``) turns an API key into a :class:`Principal`; everything
that stores or reads a response takes one. With auth off every request is the anonymous
principal (one tenant, every model). Another tenant's object is reported exactly like a
missing one (404), so ids cannot be probed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str  # the API key's name ("" with auth off); stored with every response
    models: frozenset[str] | None = None  # the key's model allow-list; None: every model

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models


ANONYMOUS = Principal("")
