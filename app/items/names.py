"""How a tool's calls are named and wrapped for the model, wherever items are made or replayed.

A member of a namespace tool is the function ``NAMESPACE__NAME`` (the form every prompt
format can carry; Harmony shows a namespace of its own); a ``custom`` tool takes its freeform
input as ``{"input": "..."}``.
"""

from __future__ import annotations

import json

SEPARATOR = "__"  # namespace + SEPARATOR + name: the model-facing name of a namespaced tool


def model_name(name: str, namespace: str | None) -> str:
    """The name the model knows a (namespaced) tool by."""
    return f"{namespace}{SEPARATOR}{name}" if namespace else name


def custom_input(arguments: str) -> str:
    """A custom tool's ``input`` from the model's arguments (``{"input": "..."}``); text the
    model wrote without the JSON wrapper is taken as it is."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str) and len(value) == 1:
        return str(value["input"])
    return arguments


def custom_arguments(text: str) -> str:
    """The arguments a ``custom_tool_call`` input stands for, as the model wrote them."""
    return json.dumps({"input": text}, ensure_ascii=False)
