"""Strict JSON Schema validation against the Open Responses OpenAPI document.

The document (version 2026-04-24) ships inside the package as ``openapi.json`` so the
command works from an installed wheel.  ``$ref``\\ s resolve within the document through a
``referencing`` registry.  ``jsonschema`` is optional at run time (the ``conformance`` extra):
without it :func:`available` is false and every schema verdict is reported as skipped.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from importlib import resources
from typing import Any

Json = dict[str, Any]
DOCUMENT_URI = "urn:openresponses"
MISSING = ("jsonschema is not installed, so the schema verdicts are skipped: "
           "pip install 'ocm-gateway[conformance]'")


@functools.cache
def document() -> Json:
    text = resources.files("app.cli.conformance").joinpath("openapi.json").read_text(encoding="utf-8")
    doc: Json = json.loads(text)
    return doc


def available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("jsonschema", "referencing"))


@functools.cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    if name not in document()["components"]["schemas"]:
        raise KeyError(f"no schema {name!r} in the Open Responses document")
    registry: Any = Registry().with_resource(DOCUMENT_URI, Resource(document(), DRAFT202012))  # type: ignore[call-arg]
    return Draft202012Validator({"$ref": f"{DOCUMENT_URI}#/components/schemas/{name}"}, registry=registry)


@functools.cache
def event_schemas() -> dict[str, str]:
    """Streaming event ``type`` -> the name of its schema."""
    out: dict[str, str] = {}
    for name, schema in document()["components"]["schemas"].items():
        if name.endswith("StreamingEvent"):
            for type_ in schema.get("properties", {}).get("type", {}).get("enum", []):
                out[type_] = name
    return out


def validate(name: str, instance: Any, *, limit: int = 3) -> list[str]:
    """Problems of ``instance`` against ``components/schemas/{name}`` (empty: valid)."""
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{name} at /{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:limit]]


def validate_event(event: Any) -> list[str]:
    """Problems of one streamed event against the schema its ``type`` names."""
    if not isinstance(event, dict):
        return [f"event is not a JSON object: {str(event)[:80]}"]
    name = event_schemas().get(str(event.get("type", "")))
    if name is None:
        return [f"unknown streaming event type {event.get('type')!r}"]
    return [f"{event.get('type')} #{event.get('sequence_number')}: {p}" for p in validate(name, event)]
