"""app/items/sealing.py: AES-GCM tokens bound to purpose and tenant; every failure a 400."""

from __future__ import annotations

import base64
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import InvalidRequest
from app.items.sealing import PREFIX, SERVE_KEY_ENV, Sealer, parse_key, serve_key

KEY = base64.b64encode(bytes(range(32))).decode()
OTHER = base64.urlsafe_b64encode(bytes(range(1, 33))).decode().rstrip("=")
SEALER = Sealer.from_config(KEY)


def _open(token: object, sealer: Sealer = SEALER, purpose: str = "reasoning", tenant: str = "a") -> bytes:
    return sealer.open(token, purpose=purpose, tenant=tenant, param="input[0].encrypted_content")


def test_round_trip_and_fresh_nonces() -> None:
    one = SEALER.seal(b"thinking", purpose="reasoning", tenant="a")
    two = SEALER.seal(b"thinking", purpose="reasoning", tenant="a")
    assert one.startswith(PREFIX) and one != two
    assert _open(one) == _open(two) == b"thinking"
    assert b"thinking" not in base64.urlsafe_b64decode(one[len(PREFIX):] + "==")


@pytest.mark.parametrize("change", [{"tenant": "b"}, {"purpose": "compaction"}])
def test_bound_to_tenant_and_purpose(change: dict[str, str]) -> None:
    token = SEALER.seal(b"secret", purpose="reasoning", tenant="a")
    with pytest.raises(InvalidRequest) as err:
        SEALER.open(token, **{"purpose": "reasoning", "tenant": "a", **change},
                    param="input[0].encrypted_content")
    assert err.value.param == "input[0].encrypted_content"
    assert err.value.code == "invalid_encrypted_content" and err.value.status == 400
    assert "does not authenticate" in err.value.message


def test_wrong_key_and_rotation() -> None:
    token = Sealer.from_config(OTHER).seal(b"x", purpose="reasoning", tenant="a")
    with pytest.raises(InvalidRequest, match="key this gateway does not have"):
        _open(token)
    rotated = Sealer.from_config(KEY, [OTHER])  # new key seals, the old one still opens
    assert _open(token, rotated) == b"x"
    assert _open(rotated.seal(b"y", purpose="reasoning", tenant="a"), SEALER) == b"y"


def test_unset_key_is_per_process_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ocm_gateway"):
        first, second = Sealer.from_config(None), Sealer.from_config(None)
    assert first.ephemeral and "encryption_key is not set" in caplog.text
    token = first.seal(b"x", purpose="reasoning", tenant="")
    assert _open(token, first, tenant="") == b"x"
    with pytest.raises(InvalidRequest, match="per-process key"):
        _open(token, second, tenant="")


@pytest.mark.parametrize("bad", ["c2hvcnQ=", "A" * 44, "x" * 42 + "!", base64.b64encode(b"k" * 16).decode()])
def test_bad_configured_keys_fail_at_startup(bad: str) -> None:
    with pytest.raises(ValueError, match="openssl rand -base64 32"):
        Sealer.from_config(bad)


def test_both_base64_alphabets_and_padding() -> None:
    raw = bytes([251, 255] * 16)
    for text in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode().rstrip("=")):
        assert parse_key(text) == raw


@pytest.mark.parametrize("token", [None, 12, "", "ocm1.", "ocm2.AAAA", "ocm1.%%%", "ocm1." + "A" * 20,
                                   "ocm1.é" * 30])
def test_malformed_tokens(token: object) -> None:
    with pytest.raises(InvalidRequest) as err:
        _open(token)
    assert err.value.param == "input[0].encrypted_content"


@given(st.binary(max_size=256), st.text(max_size=20), st.sampled_from(["reasoning", "compaction"]))
def test_any_plaintext_round_trips(plain: bytes, tenant: str, purpose: str) -> None:
    token = SEALER.seal(plain, purpose=purpose, tenant=tenant)
    assert SEALER.open(token, purpose=purpose, tenant=tenant, param="p") == plain


@given(st.text(max_size=300))
def test_the_decoder_refuses_any_text_with_a_400(token: str) -> None:
    try:
        _open(token)
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.param == "input[0].encrypted_content"
    else:  # pragma: no cover - forging a tag is what AES-GCM rules out
        raise AssertionError("an arbitrary string opened")


TOKEN = SEALER.seal(b"chain of thought", purpose="reasoning", tenant="a")


@given(st.data())
def test_every_single_character_change_is_refused(data: st.DataObject) -> None:
    token = TOKEN  # sealed once: hypothesis replays examples against the same token
    i = data.draw(st.integers(len(PREFIX), len(token) - 1))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    char = data.draw(st.sampled_from(alphabet).filter(lambda c: c != token[i]))
    forged = token[:i] + char + token[i + 1:]
    if base64.urlsafe_b64decode(forged[len(PREFIX):] + "==") == base64.urlsafe_b64decode(
            token[len(PREFIX):] + "=="):
        return  # the last character's unused low bits: the same bytes
    with pytest.raises(InvalidRequest):
        _open(forged)


def test_without_a_key_the_workers_of_one_serve_share_its_random_key(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """serve with N workers hands them one random key (SERVE_KEY_ENV): a token sealed by one
    opens on another; without it each process has its own, and a token dies with it."""
    monkeypatch.delenv(SERVE_KEY_ENV, raising=False)
    alone = [Sealer.from_config(None), Sealer.from_config(None)]
    token = alone[0].seal(b"thinking", purpose="reasoning", tenant="a")
    with pytest.raises(InvalidRequest):
        _open(token, alone[1])
    monkeypatch.setenv(SERVE_KEY_ENV, serve_key())
    with caplog.at_level(logging.WARNING, logger="ocm_gateway"):
        worker_a, worker_b = Sealer.from_config(None), Sealer.from_config(None)
    assert "random key of this serve (its workers share it)" in caplog.text
    assert worker_a.ephemeral and worker_b.ephemeral
    token = worker_a.seal(b"thinking", purpose="reasoning", tenant="a")
    assert _open(token, worker_b) == b"thinking"
    with pytest.raises(InvalidRequest):
        _open(token, alone[0])
    assert _open(SEALER.seal(b"x", purpose="reasoning", tenant="a"), Sealer.from_config(KEY)) == b"x"
