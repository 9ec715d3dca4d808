"""Sealed state for stateless continuation: ``encrypted_content`` of reasoning and compaction items.

With ``store: false`` the gateway keeps nothing, so what a later request needs (the chain of
thought of a reasoning item, the transcript a compaction item stands for) travels with the
client, sealed: AES-256-GCM under the gateway's key (``[responses] encryption_key``), so a
client can neither read nor alter it.  The associated data binds each token to

* its *purpose* (``reasoning`` / ``compaction``): one kind cannot be passed off as the other;
* the *tenant* that made it (the API key's name, ``""`` with auth off): another tenant's
  token does not open, so one customer cannot replay another's reasoning.

Token: ``ocm1.`` + base64url (no padding) of ``key id (4) | nonce (12) | ciphertext + tag``;
the key id (the first 4 bytes of the key's SHA-256) picks the key, so keys can be rotated
(``previous_encryption_keys`` still open old tokens).  Every failure to open is a 400
naming the parameter that carried the token, never a 500.

Without a configured key the tokens are sealed with a random key of the running ``serve``:
``serve`` with more than one worker draws it once and hands it to its workers in
:data:`SERVE_KEY_ENV` (:func:`serve_key`), so a token made by one worker opens on every other
(an agent's next request may reach any of them); it still dies with the ``serve`` process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
from collections.abc import Sequence

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.core.errors import InvalidRequest

log = logging.getLogger("ocm_gateway")

PREFIX = "ocm1."
_KEY_ID = 4
_NONCE = 12
_TAG = 16
CODE = "invalid_encrypted_content"
SERVE_KEY_ENV = "OCMGW_SERVE_SEAL_KEY"  # the random key one serve's workers share (no key configured)


def serve_key() -> str:
    """A fresh random key, as :data:`SERVE_KEY_ENV` carries it to ``serve``'s workers."""
    return base64.urlsafe_b64encode(AESGCM.generate_key(bit_length=256)).decode()


def parse_key(text: str) -> bytes:
    """A configured key: 32 bytes in base64 (standard or URL-safe alphabet, padding optional)."""
    raw = text.strip()
    try:
        key = base64.urlsafe_b64decode(raw.replace("+", "-").replace("/", "_") + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("[responses] encryption_key must be 32 random bytes in base64 "
                         "(generate one with: openssl rand -base64 32)") from exc
    if len(key) != 32:
        raise ValueError(f"[responses] encryption_key must decode to 32 bytes (AES-256), not "
                         f"{len(key)} (generate one with: openssl rand -base64 32)")
    return key


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:_KEY_ID]


def _b64decode(text: str) -> bytes | None:
    if not text.isascii():
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


class Sealer:
    """Seals and opens tokens; the first key seals, every key opens."""

    def __init__(self, key: bytes, previous: Sequence[bytes] = (), *, ephemeral: bool = False) -> None:
        self.ephemeral = ephemeral  # a per-process random key: tokens die with the process
        self._seal_id = _key_id(key)
        self._seal = AESGCM(key)
        self._open = {_key_id(k): AESGCM(k) for k in (*previous, key)}

    @classmethod
    def from_config(cls, key: str | None, previous: Sequence[str] = ()) -> Sealer:
        """The configured key, or (unset) the random one of this ``serve`` (its workers share it:
        :data:`SERVE_KEY_ENV`) or of this process, with a warning."""
        if key:
            return cls(parse_key(key), [parse_key(k) for k in previous])
        shared = os.environ.get(SERVE_KEY_ENV, "")
        log.warning("[responses] encryption_key is not set: encrypted_content (reasoning and "
                    "compaction items) is sealed with a random key of this %s and cannot be "
                    "opened after a restart or by another replica; set it (openssl rand -base64 32)",
                    "serve (its workers share it)" if shared else "process")
        random_key = parse_key(shared) if shared else AESGCM.generate_key(bit_length=256)
        return cls(random_key, [parse_key(k) for k in previous], ephemeral=True)

    @staticmethod
    def _aad(purpose: str, tenant: str) -> bytes:
        return b"ocm-gateway/" + purpose.encode() + b"\x00" + tenant.encode()

    def seal(self, plaintext: bytes, *, purpose: str, tenant: str) -> str:
        nonce = os.urandom(_NONCE)
        sealed = self._seal.encrypt(nonce, plaintext, self._aad(purpose, tenant))
        return PREFIX + base64.urlsafe_b64encode(self._seal_id + nonce + sealed).decode().rstrip("=")

    def open(self, token: object, *, purpose: str, tenant: str, param: str) -> bytes:
        """The plaintext of ``token``, or a 400 naming ``param``."""
        if not isinstance(token, str) or not token.startswith(PREFIX):
            raise InvalidRequest(f"{param} is not encrypted content made by this gateway.",
                                 param=param, code=CODE)
        raw = _b64decode(token[len(PREFIX):])
        if raw is None or len(raw) < _KEY_ID + _NONCE + _TAG:
            raise InvalidRequest(f"{param} is malformed (truncated or not base64url).",
                                 param=param, code=CODE)
        aead = self._open.get(raw[:_KEY_ID])
        if aead is None:
            why = (" (this gateway runs with a per-process key, so content from before a restart or "
                   "from another worker cannot be opened: set [responses] encryption_key)"
                   if self.ephemeral else " (the key was rotated out)")
            raise InvalidRequest(f"{param} was sealed with a key this gateway does not have{why}.",
                                 param=param, code=CODE)
        nonce, sealed = raw[_KEY_ID:_KEY_ID + _NONCE], raw[_KEY_ID + _NONCE:]
        try:
            return aead.decrypt(nonce, sealed, self._aad(purpose, tenant))
        except InvalidTag:
            raise InvalidRequest(f"{param} does not authenticate: it was altered, or it was made "
                                 f"for another API key or another kind of item.",
                                 param=param, code=CODE) from None

    def seal_field(self, name: str, value: object, *, purpose: str, tenant: str) -> str:
        """``{"v": 1, name: value}`` sealed (the envelope every sealed item uses)."""
        return self.seal(orjson.dumps({"v": 1, name: value}), purpose=purpose, tenant=tenant)

    def open_field(self, token: object, name: str, *, purpose: str, tenant: str,
                   param: str) -> object:
        """The ``name`` field of a sealed envelope (None when it is not a version-1 envelope
        holding one); a token that does not open is a 400 naming ``param``."""
        plain = self.open(token, purpose=purpose, tenant=tenant, param=param)
        try:
            data = orjson.loads(plain)
        except orjson.JSONDecodeError:
            return None
        return data.get(name) if isinstance(data, dict) and data.get("v") == 1 else None
