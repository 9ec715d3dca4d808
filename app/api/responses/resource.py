"""The response resource a create starts from: the request's fields echoed as an Open
Responses ``Response`` (the object of ``response.created``), with no output yet.

:func:`start_resource` fills what the request left out with the values the run uses (the
plan's ``parallel_tool_calls`` and reasoning effort, ``temperature`` / ``top_p`` 1.0, tool
choice ``auto``); the encoder (:class:`~app.api.responses.encode.ResponsesEncoder`) folds the
run's events into it from there.
"""

from __future__ import annotations

import time
from typing import Any

from app.api.responses.ingest import echo_of
from app.engine.engine import Plan
from schemas.responses import CreateResponseBody, TextFormatJSONSchema

Json = dict[str, Any]


def start_resource(body: CreateResponseBody, response_id: str, plan: Plan, status: str) -> Json:
    """The resource of a response ``status`` (``queued`` or ``in_progress``) to ``body``."""
    params = plan.params
    tools = list(echo_of(body))
    fmt: Json = {"type": "text"}
    f = body.text.format if body.text else None
    if isinstance(f, TextFormatJSONSchema):
        # The Open Responses document types the echoed schema as null (JsonSchemaResponseFormat).
        fmt = {"type": "json_schema", "name": f.name, "description": f.description, "schema": None,
               "strict": bool(f.strict)}
    elif f is not None:
        fmt = {"type": f.type}
    choice = body.tool_choice
    tool_choice: Any = choice if isinstance(choice, str) or choice is None else choice.model_dump()
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()), "completed_at": None,
        "status": status, "incomplete_details": None, "model": body.model,
        "previous_response_id": body.previous_response_id, "instructions": body.instructions,
        "output": [], "error": None, "tools": tools, "tool_choice": tool_choice or "auto",
        "truncation": body.truncation, "parallel_tool_calls": params.parallel_tool_calls,
        "text": {"format": fmt}, "top_p": body.top_p if body.top_p is not None else 1.0,
        "presence_penalty": body.presence_penalty or 0.0, "frequency_penalty": body.frequency_penalty or 0.0,
        "top_logprobs": body.top_logprobs or 0,
        "temperature": body.temperature if body.temperature is not None else 1.0,
        "reasoning": {"effort": plan.reasoning_effort,
                      "summary": body.reasoning.summary if body.reasoning else None}, "usage": None,
        "max_output_tokens": body.max_output_tokens, "max_tool_calls": body.max_tool_calls,
        "store": body.store, "background": body.background, "service_tier": body.service_tier,
        "metadata": body.metadata or {}, "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
    }
