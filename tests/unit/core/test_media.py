"""The image decoder (data URLs only, strict base64, a size cap, real image bytes) and the
image segment encoding."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.cli.conformance.responses import HEART_PNG
from app.core.errors import InvalidRequest
from app.core.media import (
    check_image_url,
    has_image_marks,
    image_payload,
    image_segment,
    segment_image,
    sniff,
)

MAGIC = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a"]


def _url(data: bytes, mime: str = "image/png", params: str = "") -> str:
    return f"data:{mime}{params};base64,{base64.b64encode(data).decode()}"


def test_a_png_data_url() -> None:
    image = check_image_url(f"data:image/png;base64,{HEART_PNG}", "p")
    assert (image.mime, image.base64, image.size) == ("image/png", HEART_PNG, 467)
    assert check_image_url(f"data:image/gif;x=y;base64,{HEART_PNG}", "p").url == (
        f"data:image/png;base64,{HEART_PNG}")
    assert image_payload(f"data:image/png;base64,{HEART_PNG}") == HEART_PNG


def test_the_format_comes_from_the_bytes_and_parameters_are_allowed() -> None:
    jpeg = b"\xff\xd8\xff\xe0" + bytes(20)
    assert check_image_url(_url(jpeg, "IMAGE/PNG", ";name=x.png"), "p").mime == "image/jpeg"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff(b"BM....") is None


@pytest.mark.parametrize(("url", "code"), [
    ("https://example.com/a.png", "invalid_image_url"),
    ("HTTP://example.com/a.png", "invalid_image_url"),
    ("", "invalid_image_url"),
    ("data:", "invalid_image_url"),
    ("data:image/png;base64", "invalid_image_url"),
    ("data:;base64,AAAA", "invalid_image_url"),
    ("data:application/octet-stream;base64,AAAA", "invalid_image_url"),
    ("data:image/png;base64;charset=x,AAAA", "invalid_image_url"),
    ("data:image/png;base64,A", "invalid_base64"),
    ("data:image/png;base64,AA==AA==", "invalid_base64"),
    ("data:image/png;base64,AA-_", "invalid_base64"),
    ("data:image/png;base64, AAAA", "invalid_base64"),
    ("data:image/png;base64,AAAA", "invalid_image"),
])
def test_refusals_name_the_part(url: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_image_url(url, "messages[3].content[1]")
    assert (info.value.code, info.value.param) == (code, "messages[3].content[1]")
    assert info.value.status == 400


def test_the_size_cap_is_on_decoded_bytes_and_checked_before_decoding() -> None:
    data = MAGIC[0] + bytes(92)  # 100 bytes
    assert check_image_url(_url(data), "p", limit=100).size == 100
    with pytest.raises(InvalidRequest, match="larger than 99 bytes") as info:
        check_image_url(_url(data), "p", limit=99)
    assert info.value.code == "image_too_large"
    huge = "data:image/png;base64," + "A" * 4_000_000  # refused by length alone
    with pytest.raises(InvalidRequest) as info:
        check_image_url(huge, "p", limit=1000)
    assert info.value.code == "image_too_large"


@given(st.sampled_from(MAGIC), st.binary(max_size=300))
def test_every_image_round_trips(magic: bytes, tail: bytes) -> None:
    data = magic + tail
    image = check_image_url(_url(data), "p")
    assert base64.b64decode(image.base64) == data and image.size == len(data)


@given(st.text(max_size=200))
def test_any_text_is_an_image_or_a_400(url: str) -> None:
    try:
        check_image_url(url, "p")
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.param == "p"


@given(st.binary(max_size=200))
def test_bytes_without_an_image_signature_are_refused(data: bytes) -> None:
    if sniff(data) is not None:
        return
    with pytest.raises(InvalidRequest) as info:
        check_image_url(_url(data), "p")
    assert info.value.code in ("invalid_image", "invalid_base64")  # empty data: no base64 at all


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", max_size=60))
def test_base64_like_payloads_never_escape_as_another_error(payload: str) -> None:
    try:
        check_image_url(f"data:image/gif;base64,{payload}", "p")
    except InvalidRequest as exc:
        assert exc.code in ("invalid_base64", "invalid_image")


@given(st.text(max_size=40), st.text(alphabet="ABCDab01+/=", max_size=40))
def test_image_segments_round_trip(param: str, payload: str) -> None:
    segment = image_segment(param, payload)
    if has_image_marks(param):
        return
    assert segment_image(segment) == (param, payload) and has_image_marks(segment)


def test_text_is_not_an_image_segment() -> None:
    assert segment_image("plain") is None and not has_image_marks("plain <b>")
