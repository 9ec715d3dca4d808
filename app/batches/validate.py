"""Checking a batch's input file before any of it runs.

The file is read as it streams from the file store (never whole in memory), split into lines,
and every line is checked: JSON object; ``custom_id`` a non-empty string, unique in the file;
``method`` ``POST``; ``url`` the batch's endpoint; ``body`` an object that the endpoint's own
request schema accepts (the same pydantic model its route validates with), not streamed, its
``model`` one the batch's key may use — and the file within the size and line limits.  The
checks of a piece of lines run in a worker thread (pydantic over thousands of bodies would
hold the event loop).  Errors are OpenAI's ``{code, message, param, line}`` (1-based lines);
the first :data:`MAX_ERRORS` are kept.  One bad line fails the whole batch and no request runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson
from pydantic import BaseModel, ValidationError

from app.batches.model import Json, Line
from schemas.chat import ChatCompletionRequest
from schemas.completions import CompletionRequest, EmbeddingRequest
from schemas.messages import MessagesRequest
from schemas.responses import CreateResponseBody

SCHEMAS: dict[str, type[BaseModel]] = {
    "/v1/chat/completions": ChatCompletionRequest, "/v1/responses": CreateResponseBody,
    "/v1/embeddings": EmbeddingRequest, "/v1/completions": CompletionRequest,
    "/v1/messages": MessagesRequest}
MAX_ERRORS = 100
PIECE = 500  # lines checked per worker-thread hop
MAX_CUSTOM_ID = 512
TOO_LONG = b"\0"  # stands for a line over the limit (its bytes are never held)


@dataclass
class Checked:
    lines: list[Line] = field(default_factory=list)
    errors: list[Json] = field(default_factory=list)
    models: set[str] = field(default_factory=set)


def _error(line: int, code: str, message: str, param: str | None = None) -> Json:
    return {"code": code, "line": line, "message": message, "param": param}


def _param(err: ValidationError) -> tuple[str, str]:
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"body.{where}" if where else "body", str(first.get("msg", "invalid value"))[:300]


def check_line(raw: bytes, number: int, endpoint: str, may_use: Callable[[str], bool],
               seen: set[str], out: Checked) -> None:
    """Check one input line; its request goes to ``out.lines``, or its error to ``out.errors``."""
    def fail(code: str, message: str, param: str | None = None) -> None:
        out.errors.append(_error(number, code, message, param))

    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return fail("invalid_json_line", "This line is not parseable as valid JSON.")
    if not isinstance(data, dict):
        return fail("invalid_request", "Each line must be a JSON object.")
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        return fail("invalid_request", f"'custom_id' must be a non-empty string of at most "
                    f"{MAX_CUSTOM_ID} characters.", "custom_id")
    if custom_id in seen:
        return fail("duplicate_custom_id", f"The custom_id {custom_id[:64]!r} appears more than "
                    "once; each request needs a unique custom_id.", "custom_id")
    if data.get("method") != "POST":
        return fail("invalid_request", "'method' must be 'POST'.", "method")
    if data.get("url") != endpoint:
        return fail("mismatched_endpoint", f"The url {str(data.get('url'))[:64]!r} does not match "
                    f"the batch's endpoint {endpoint!r}.", "url")
    body = data.get("body")
    if not isinstance(body, dict):
        return fail("invalid_request", "'body' must be a JSON object.", "body")
    if body.get("stream"):
        return fail("invalid_request", "Streaming is not supported in a batch.", "body.stream")
    try:
        SCHEMAS[endpoint].model_validate(body)
    except ValidationError as exc:
        param, message = _param(exc)
        return fail("invalid_request", message, param)
    model = body.get("model")
    if not isinstance(model, str) or not may_use(model):
        return fail("model_not_found", f"The model {str(model)[:64]!r} does not exist or you do "
                    "not have access to it.", "body.model")
    seen.add(custom_id)
    out.models.add(model)
    out.lines.append(Line("", number, custom_id, orjson.dumps(body)))


async def read_lines(chunks: AsyncIterator[bytes], max_line: int) -> AsyncIterator[list[bytes]]:
    """The file's lines (blank ones too, so numbers match the file), a few hundred at a time;
    a line over ``max_line`` bytes is given as ``b"\\0"`` (refused by :func:`check`) and the
    rest of it is skipped as it streams, never held.  Each chunk is split once and only its
    own bytes are scanned (a long line arriving in many chunks is not re-scanned per chunk)."""
    held: list[bytes] = []  # the pieces of the line not ended yet
    size, skipping = 0, False
    batch: list[bytes] = []
    async for chunk in chunks:
        parts = chunk.split(b"\n")
        for end in parts[:-1]:  # each ends a line
            if skipping or size + len(end) > max_line:
                batch.append(TOO_LONG)
            else:
                batch.append(b"".join([*held, end]) if held else end)
            held, size, skipping = [], 0, False
        tail = parts[-1]
        if not skipping and tail:
            size += len(tail)
            if size > max_line:
                held, size, skipping = [], 0, True
            else:
                held.append(tail)
        if len(batch) >= PIECE:
            yield batch
            batch = []
    if skipping:
        batch.append(TOO_LONG)
    elif held:
        batch.append(b"".join(held))
    if batch:
        yield batch


async def check(chunks: AsyncIterator[bytes], endpoint: str, may_use: Callable[[str], bool], *,
                max_lines: int, max_line: int,
                keep: Callable[[list[Line]], Awaitable[None]] | None = None) -> Checked:
    """Check a whole input file; valid lines are handed to ``keep`` a piece at a time (and
    dropped from the result), so memory stays bounded whatever the file's size."""
    out, seen, number = Checked(), set[str](), 0

    def piece(raws: list[bytes], first: int) -> None:
        for offset, raw in enumerate(raws):
            stripped = raw.strip()
            if stripped == b"\0":
                out.errors.append(_error(first + offset, "line_too_long", f"This line is longer "
                                         f"than {max_line} bytes."))
            elif stripped:
                check_line(stripped, first + offset, endpoint, may_use, seen, out)

    async for raws in read_lines(chunks, max_line):
        await asyncio.to_thread(piece, raws, number + 1)
        number += len(raws)
        if len(seen) > max_lines:
            out.errors.append(_error(number, "too_many_requests", f"The file has more than "
                                     f"{max_lines} requests."))
            break
        if keep is not None and out.lines and not out.errors:
            await keep(out.lines)
            out.lines = []
        if len(out.errors) >= MAX_ERRORS:
            break
    if not seen and not out.errors:
        out.errors.append(_error(1, "empty_file", "The input file has no requests."))
    out.errors = out.errors[:MAX_ERRORS]
    return out
