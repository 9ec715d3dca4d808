"""Images in requests: checked once at ingest, and how one rides in a segmented prompt.

An image reaches the gateway as a Chat Completions ``image_url`` part or an Open Responses
``input_image``.  :func:`check_image_url` accepts only an inline ``data:image/...;base64,``
URL whose payload is strict base64 (standard alphabet, padded, no whitespace), at most
:data:`MAX_IMAGE_BYTES` once decoded, and whose bytes are a PNG, JPEG, GIF or WebP image.
An ``http(s)`` URL is refused: the gateway never fetches an address a client names (there
is no operator allow-list), and handing it to a backend would make the backend fetch it.

A prompt rendered into (text, trusted) segments (:mod:`app.formats.template.render`)
carries an image as a trusted segment of its own, made by :func:`image_segment`: private-use
characters around the request parameter that holds it and its base64 payload.  Templates
never produce those characters and client text is never trusted, so only the renderer can
make one; a backend that can see (llama.cpp with a multimodal projector) turns it into its
media marker plus the image, every other backend refuses it.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from app.core.errors import InvalidRequest

MAX_IMAGE_BYTES = 10 * 1024 * 1024  # decoded; OpenAI's own cap is 20 MB, llama.cpp fetches 10 MB

_HEADER = re.compile(r"data:(?P<mime>image/[A-Za-z0-9.+-]+)(?P<params>(?:;[A-Za-z0-9.+=-]+)*)",
                     re.IGNORECASE)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
)

_OPEN, _SEP, _CLOSE = "\ue010", "\ue011", "\ue012"  # private use: no template or client makes a trusted one


@dataclass(frozen=True, slots=True)
class CheckedImage:
    """A decoded image: its format (from its bytes, not its URL) and its base64 payload."""

    mime: str
    base64: str
    size: int

    @property
    def url(self) -> str:
        """The image as a canonical data URL: the type its bytes have, no other parameters."""
        return f"data:{self.mime};base64,{self.base64}"


def sniff(data: bytes) -> str | None:
    """The image format of ``data`` from its first bytes, or None."""
    for magic, offset, mime in _MAGIC:
        if data[offset:offset + len(magic)] == magic:
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_image_url(url: str, param: str, limit: int | None = None) -> CheckedImage:
    """The image of a ``data:image/...;base64,`` URL, or a 400 naming ``param``
    (``limit``: the largest image in bytes, :data:`MAX_IMAGE_BYTES` by default)."""
    limit = MAX_IMAGE_BYTES if limit is None else limit
    if url[:5].lower() != "data:":
        scheme = url.split(":", 1)[0][:16] if ":" in url else ""
        what = f"a {scheme}: URL" if scheme else "not a URL"
        raise InvalidRequest(
            f"Images must be sent inline as data:image/...;base64,... URLs; {param} is {what}. "
            "The gateway does not fetch images from addresses.", param=param, code="invalid_image_url")
    header, comma, payload = url.partition(",")
    match = _HEADER.fullmatch(header)
    if not comma or match is None or match.group("params").lower().split(";")[-1] != "base64":
        raise InvalidRequest(f"{param} is not a data:image/<type>;base64,<data> URL.", param=param,
                             code="invalid_image_url")
    if len(payload) // 4 * 3 > limit + 2:
        raise InvalidRequest(f"The image in {param} is larger than {limit} bytes.", param=param,
                             code="image_too_large")
    if not payload or len(payload) % 4 or _BASE64.fullmatch(payload) is None:
        raise InvalidRequest(f"The data of {param} is not valid base64 (standard alphabet, padded, "
                             "no whitespace).", param=param, code="invalid_base64")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"The data of {param} is not valid base64.", param=param,
                             code="invalid_base64") from None
    if len(data) > limit:
        raise InvalidRequest(f"The image in {param} is larger than {limit} bytes.", param=param,
                             code="image_too_large")
    mime = sniff(data)
    if mime is None:
        raise InvalidRequest(f"The data of {param} is not a PNG, JPEG, GIF or WebP image.",
                             param=param, code="invalid_image")
    return CheckedImage(mime, payload, len(data))


def image_segment(param: str, payload: str) -> str:
    """The text of the trusted segment that stands for one image (see the module docstring)."""
    return f"{_OPEN}{param}{_SEP}{payload}{_CLOSE}"


def segment_image(text: str) -> tuple[str, str] | None:
    """(param, base64 payload) when ``text`` is an :func:`image_segment`, else None."""
    if not (text.startswith(_OPEN) and text.endswith(_CLOSE)) or _SEP not in text:
        return None
    param, _, payload = text[1:-1].partition(_SEP)
    return param, payload


def has_image_marks(text: str) -> bool:
    """Whether ``text`` holds any of the characters an image segment is made of."""
    return _OPEN in text or _SEP in text or _CLOSE in text


def image_payload(url: str) -> str:
    """The base64 payload of an image URL that :func:`check_image_url` accepted."""
    return url.partition(",")[2]
