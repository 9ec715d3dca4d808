"""The served OpenAPI document, made to tell the truth about the wire.

FastAPI's generated document says every route answers 422 ``HTTPValidationError`` and 200
with an empty schema. This gateway answers 400 with the OpenAI error object for invalid
input (and 401 / 404 / 413 / 422 / 429 / 502 / 503 / 504 in the same shape), streams
``text/event-stream`` when asked, and has real bodies. :func:`document` rewrites the
generated document accordingly; the schemas are documentation only (responses are not
built from pydantic models: tests validate them against the Open Responses OpenAPI
document itself).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

Json = dict[str, Any]

_ERROR: Json = {
    "type": "object", "required": ["error"], "additionalProperties": False,
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
_USAGE: Json = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
                "properties": {"prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
                               "total_tokens": {"type": "integer"}}}
_CHAT_COMPLETION: Json = {
    "type": "object", "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "id": {"type": "string"}, "object": {"const": "chat.completion"},
        "created": {"type": "integer"}, "model": {"type": "string"},
        "choices": {"type": "array", "items": {
            "type": "object", "required": ["index", "message", "finish_reason"],
            "properties": {"index": {"type": "integer"},
                           "message": {"type": "object", "required": ["role"],
                                       "properties": {"role": {"const": "assistant"},
                                                      "content": {"type": ["string", "null"]},
                                                      "reasoning_content": {"type": ["string", "null"]},
                                                      "tool_calls": {"type": "array"}}},
                           "finish_reason": {"enum": ["stop", "length", "tool_calls"]}}}},
        "usage": _USAGE,
    },
}
_RESPONSE: Json = {  # the Open Responses resource (the full schema is in the Open Responses spec)
    "type": "object", "required": ["id", "object", "created_at", "status", "model", "output"],
    "properties": {"id": {"type": "string"}, "object": {"const": "response"},
                   "created_at": {"type": "integer"},
                   "status": {"enum": ["queued", "in_progress", "completed", "incomplete", "failed",
                                       "cancelled"]},
                   "model": {"type": "string"}, "output": {"type": "array"}},
}
_LIST: Json = {"type": "object", "required": ["object", "data", "first_id", "last_id", "has_more"],
               "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _RESPONSE},
                              "first_id": {"type": ["string", "null"]},
                              "last_id": {"type": ["string", "null"]}, "has_more": {"type": "boolean"}}}
_FILE: Json = {"type": "object", "required": ["id", "object", "bytes", "created_at", "filename",
                                            "purpose", "status"],
               "properties": {"id": {"type": "string"}, "object": {"const": "file"},
                              "bytes": {"type": "integer"}, "created_at": {"type": "integer"},
                              "expires_at": {"type": ["integer", "null"]}, "filename": {"type": "string"},
                              "purpose": {"type": "string"}, "status": {"const": "processed"}}}
_FILE_LIST: Json = {**_LIST, "properties": {**_LIST["properties"], "data": {"type": "array", "items": _FILE}}}
_FILE_DELETED: Json = {"type": "object", "required": ["id", "object", "deleted"],
                       "properties": {"id": {"type": "string"}, "object": {"const": "file"},
                                      "deleted": {"const": True}}}
_SSE: Json = {"text/event-stream": {"schema": {"type": "string", "description": (
    "Server-sent events, one JSON payload per `data:` line, ending with `data: [DONE]` "
    "(see docs/api/chat-completions.md).")}}}
_OK: dict[tuple[str, str], Json] = {
    ("/v1/chat/completions", "post"): {"application/json": {"schema": _CHAT_COMPLETION}, **_SSE},
    ("/invocations", "post"): {"application/json": {"schema": _CHAT_COMPLETION},
                               "application/jsonlines": {"schema": {"type": "string"}}},
    ("/v1/responses", "post"): {"application/json": {"schema": _RESPONSE}, **_SSE},
    ("/v1/responses", "get"): {"application/json": {"schema": _LIST}},
    ("/v1/responses/{response_id}", "get"): {"application/json": {"schema": _RESPONSE}},
    ("/v1/responses/{response_id}/cancel", "post"): {"application/json": {"schema": _RESPONSE}},
    ("/metrics", "get"): {"text/plain": {"schema": {"type": "string"}}},
    ("/v1/files", "post"): {"application/json": {"schema": _FILE}},
    ("/v1/files", "get"): {"application/json": {"schema": _FILE_LIST}},
    ("/v1/files/{file_id}", "get"): {"application/json": {"schema": _FILE}},
    ("/v1/files/{file_id}", "delete"): {"application/json": {"schema": _FILE_DELETED}},
    ("/v1/files/{file_id}/content", "get"): {"*/*": {
        "schema": {"type": "string", "format": "binary",
                   "description": "The file's bytes, with the media type it was uploaded with."}}},
}
_ANTHROPIC_ERROR: Json = {
    "type": "object", "required": ["type", "error"], "additionalProperties": False,
    "properties": {"type": {"const": "error"}, "error": {
        "type": "object", "required": ["type", "message"],
        "properties": {"type": {"enum": ["invalid_request_error", "authentication_error",
                                         "permission_error", "not_found_error", "request_too_large",
                                         "rate_limit_error", "api_error", "overloaded_error"]},
                       "message": {"type": "string"}}}},
}
_MESSAGE: Json = {  # Anthropic's message object
    "type": "object", "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
    "properties": {"id": {"type": "string"}, "type": {"const": "message"}, "role": {"const": "assistant"},
                   "model": {"type": "string"}, "content": {"type": "array"},
                   "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", None]},
                   "stop_sequence": {"type": ["string", "null"]}, "usage": {"type": "object"}},
}
_ANTHROPIC_SSE: Json = {"text/event-stream": {"schema": {"type": "string", "description": (
    "Anthropic's stream: named events (message_start, content_block_start / _delta / _stop, "
    "message_delta, message_stop; error), no [DONE].")}}}
_OK[("/v1/messages", "post")] = {"application/json": {"schema": _MESSAGE}, **_ANTHROPIC_SSE}
_OK[("/v1/messages/count_tokens", "post")] = {"application/json": {"schema": {
    "type": "object", "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer"}}}}}
# on /v1/messages paths errors leave in Anthropic's envelope and statuses (app/http/anthropic.py)
_ANTHROPIC_ERRORS = {"400": "Invalid request", "401": "Missing or invalid API key",
                     "404": "Unknown model or URL", "413": "Request body too large",
                     "429": "Rate limited", "500": "Backend or model output failure",
                     "529": "At capacity"}
_ERRORS = {"400": "Invalid request", "401": "Missing or invalid API key (the admin key on /admin)",
           "404": "Unknown model, response or URL (on /admin: the admin API is off)",
           "413": "Request body too large",
           "429": "Rate limited",
           "502": "Backend failure, or the model's output failed (tool_not_allowed: a call of a "
                  "function the request does not allow, with x-should-retry: false)",
           "503": "At capacity",
           "504": "Backend timeout"}


def document(app: FastAPI) -> Json:
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components["Error"] = _ERROR
    components["AnthropicError"] = _ANTHROPIC_ERROR
    for path, operations in doc.get("paths", {}).items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            ok = _OK.get((path, method))
            if ok is not None:
                responses.setdefault("200", {"description": "Successful Response"})["content"] = ok
            if method == "post" or "{" in path or op.get("parameters") or path.startswith("/admin"):
                anthropic = path.startswith("/v1/messages")
                ref = "#/components/schemas/" + ("AnthropicError" if anthropic else "Error")
                for status, description in (_ANTHROPIC_ERRORS if anthropic else _ERRORS).items():
                    responses[status] = {"description": description, "content": {
                        "application/json": {"schema": {"$ref": ref}}}}
    app.openapi_schema = doc
    return doc
