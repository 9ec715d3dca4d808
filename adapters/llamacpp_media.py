"""Images to llama.cpp: the multimodal ``/completion`` prompt, and why it stays safe.

A ``llama-server`` started with a multimodal projector (``--mmproj``) reports
``modalities.vision: true`` and its ``media_marker`` in ``GET /props`` (the marker is random
per server start unless ``LLAMA_MEDIA_MARKER`` fixes it, so it is read from the replica that
gets the request, right before sending).  ``/completion`` then takes
``"prompt": {"prompt_string": TEXT, "multimodal_data": [BASE64, ...]}``: one marker in TEXT
per image, in order.  The server cuts TEXT at the markers and tokenizes each piece with
special-token parsing *on*, adding the model's BOS in front (``mtmd_tokenize`` with
``add_special``); a token-id prompt cannot carry images (``prompt`` is either ids, mixed
ids and strings, or that object, and only the object takes ``multimodal_data``).

So client text goes upstream as text here, and the gateway's usual guarantee (client text
never becomes a control token) is kept by checking instead of by construction: for every
piece between images, the control tokens the server will find in it (``/tokenize`` with
``parse_special: true``, exactly what the server does) must be the same ids in the same
order as those of the template's own (trusted) text in it; anything else is a 400.  The
media marker in client text is refused too.  A leading BOS the template wrote is left to
the server to add, so the model sees one BOS, as on the token-id path.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.errors import InvalidRequest
from app.core.media import segment_image

Segments = Sequence[tuple[str, bool]]


def images_of(segments: Segments) -> list[tuple[str, str]]:
    """(param, base64) of each image segment, in prompt order."""
    out: list[tuple[str, str]] = []
    for text, trusted in segments:
        image = segment_image(text) if trusted else None
        if image is not None:
            out.append(image)
    return out


def strip_prefix(segments: Segments, prefix: str) -> list[tuple[str, bool]]:
    """``segments`` without a leading trusted ``prefix`` (the BOS the server adds itself)."""
    out = list(segments)
    if prefix and out and out[0][1] and segment_image(out[0][0]) is None and out[0][0].startswith(prefix):
        rest = out[0][0][len(prefix):]
        out = [(rest, True), *out[1:]] if rest else out[1:]
    return out


def pieces(segments: Segments) -> list[list[tuple[str, bool]]]:
    """The text segments between images (one list more than there are images)."""
    out: list[list[tuple[str, bool]]] = [[]]
    for text, trusted in segments:
        if trusted and segment_image(text) is not None:
            out.append([])
        else:
            out[-1].append((text, trusted))
    return out


def prompt_object(segments: Segments, marker: str) -> dict[str, object]:
    """The ``/completion`` prompt object: text with ``marker`` where each image was, and
    the images' base64 in the same order.  Client text holding the marker is refused."""
    if not marker:
        raise ValueError("empty media marker")
    texts: list[str] = []
    data: list[str] = []
    for text, trusted in segments:
        image = segment_image(text) if trusted else None
        if image is not None:
            texts.append(marker)
            data.append(image[1])
            continue
        texts.append(text)
    prompt = "".join(texts)
    if prompt.count(marker) != len(data):  # the marker typed in (or formed by) other text
        raise InvalidRequest("The message text contains this server's media marker.",
                             param="messages", code="control_token_in_text")
    return {"prompt_string": prompt, "multimodal_data": data}
