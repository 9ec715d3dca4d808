"""Served models: config → :class:`app.pipeline.ModelRoute` with live backends."""

from __future__ import annotations

from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import httpx

from adapters.base import Backend, status_error, transport_error
from adapters.llamacpp import LlamaCppBackend
from adapters.ollama import OllamaBackend
from adapters.openai_chat import OpenAIChatBackend
from adapters.routing import RetryPolicy
from adapters.vllm import VLLMBackend
from app.admission import Admission
from app.config import GatewayConfig, ModelConfig, UpstreamSettings
from app.errors import ModelNotFound, UpstreamError
from app.formats import (
    BackendTemplateFormat,
    ChatFormat,
    HarmonyFormat,
    OpenChatMLFormat,
    PromptFormat,
    TemplateFetcher,
    TemplateFormat,
)
from app.model import GenerationParams
from app.pipeline import ModelRoute
from app.render.harmony import HarmonyOptions
from app.render.openchatml import OpenChatMLOptions


def make_backend(name: str, cfg: ModelConfig, client: httpx.AsyncClient,
                 up: UpstreamSettings) -> Backend:
    policy = RetryPolicy(max_attempts=up.max_attempts, backoff=up.retry_backoff,
                         cooldown=up.cooldown_seconds, first_byte_timeout=up.first_byte_timeout,
                         attempt_timeout=up.attempt_timeout)
    if cfg.backend == "llamacpp":
        return LlamaCppBackend(client, cfg.base_urls, policy)
    if cfg.backend == "vllm":
        return VLLMBackend(client, cfg.base_urls, cfg.upstream_model or name, policy)
    if cfg.backend == "ollama":
        return OllamaBackend(client, cfg.base_urls, cfg.upstream_model or name, policy)
    if cfg.backend == "openai":
        return OpenAIChatBackend(client, cfg.base_urls, cfg.upstream_model or name, policy,
                                 api_key=cfg.api_key)
    raise ValueError(f"unknown backend kind {cfg.backend!r}")


# The special tokens each built-in template is rendered with, unless the config sets them.
BUILTIN_TOKENS: dict[str, tuple[str, str]] = {"gemma3": ("<bos>", "<eos>")}


def builtin_template(name: str) -> str:
    """A chat template shipped in ``app/templates`` (``gemma3``, ...)."""
    resource = files("app").joinpath("templates", f"{name}.jinja")
    if not name.replace("-", "").replace("_", "").isalnum() or not resource.is_file():
        raise ValueError(f"no built-in chat template named {name!r}")
    return resource.read_text(encoding="utf-8")


def props_fetcher(client: httpx.AsyncClient, base_url: str) -> TemplateFetcher:
    """Fetch (chat_template, bos_token, eos_token) from llama.cpp's ``GET /props``."""
    async def fetch() -> tuple[str, str, str]:
        try:
            response = await client.get(f"{base_url.rstrip('/')}/props")
        except httpx.HTTPError as exc:
            raise transport_error(exc, base_url) from exc
        if response.status_code != 200:
            raise status_error(response.status_code, response.content, response.headers)
        props = response.json()
        template = props.get("chat_template") if isinstance(props, dict) else None
        if not isinstance(template, str) or not template:
            raise UpstreamError(f"The backend at {base_url} reports no chat template in /props.")
        return template, str(props.get("bos_token") or ""), str(props.get("eos_token") or "")
    return fetch


def make_format(name: str, cfg: ModelConfig, client: httpx.AsyncClient | None = None) -> PromptFormat:
    if cfg.prompt_format == "harmony":
        return HarmonyFormat(HarmonyOptions(
            model_identity=cfg.harmony.model_identity,
            knowledge_cutoff=cfg.harmony.knowledge_cutoff,
            current_date=cfg.harmony.current_date,
            default_reasoning_effort=cfg.defaults.reasoning_effort or "medium",
        ))
    if cfg.prompt_format == "openchatml":
        return OpenChatMLFormat(OpenChatMLOptions(
            model=name, model_identity=cfg.harmony.model_identity,
            knowledge_cutoff=cfg.harmony.knowledge_cutoff, current_date=cfg.harmony.current_date,
            default_reasoning_effort=cfg.defaults.reasoning_effort or "medium",
            document_header=cfg.openchatml.document_header,
        ), require_channels=cfg.openchatml.require_channels)
    if cfg.prompt_format == "template":
        t = cfg.template
        if t.from_backend:
            if cfg.backend != "llamacpp" or client is None:
                raise ValueError("template.from_backend needs a llamacpp backend")
            return BackendTemplateFormat(props_fetcher(client, cfg.base_urls[0]))
        bos, eos = "", ""
        if t.path is not None:
            source = Path(t.path).expanduser().read_text(encoding="utf-8")
        elif t.builtin is not None:
            source = builtin_template(t.builtin)
            bos, eos = BUILTIN_TOKENS.get(t.builtin, ("", ""))
        else:
            raise ValueError("prompt_format 'template' needs template.path or template.builtin")
        return TemplateFormat(source, bos_token=bos if t.bos_token is None else t.bos_token,
                              eos_token=eos if t.eos_token is None else t.eos_token)
    if cfg.prompt_format == "chat":
        return ChatFormat()
    raise ValueError(f"unknown prompt format {cfg.prompt_format!r}")


class Registry:
    def __init__(self, config: GatewayConfig, client: httpx.AsyncClient,
                 admission: Admission | None = None) -> None:
        self.config = config
        self.created = 0
        self.routes: dict[str, ModelRoute] = {}
        lim = config.limits
        self.admission = admission or Admission(lim.max_inflight or config.upstream.max_connections,
                                                lim.max_queue, lim.queue_timeout)
        for name, cfg in config.models.items():
            self.routes[name] = ModelRoute(
                name=name,
                backend=make_backend(name, cfg, client, config.upstream),
                format=make_format(name, cfg, client),
                context_window=cfg.context_window,
                default_reasoning_effort=cfg.defaults.reasoning_effort or "medium",
                admission=self.admission,
            )

    def route(self, model: str) -> ModelRoute:
        try:
            return self.routes[model]
        except KeyError:
            raise ModelNotFound(f"The model {model!r} does not exist.", param="model") from None

    def with_defaults(self, model: str, params: GenerationParams) -> GenerationParams:
        d = self.config.models[model].defaults
        return replace(
            params,
            temperature=params.temperature if params.temperature is not None else d.temperature,
            top_p=params.top_p if params.top_p is not None else d.top_p,
            max_tokens=params.max_tokens if params.max_tokens is not None else d.max_tokens,
            reasoning_effort=params.reasoning_effort or d.reasoning_effort,
        )
