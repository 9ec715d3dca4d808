"""Render a Hugging Face chat template with jinja2 the way transformers does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = Path(__file__).resolve().parent.parent / "fixtures" / "templates"


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def render_template(name: str, messages: list[dict[str, Any]], *, date: str = "2026-11-22",
                    **kwargs: Any) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: date
    template = env.from_string((TEMPLATES / name).read_text())
    return template.render(messages=messages, add_generation_prompt=True, **kwargs)
