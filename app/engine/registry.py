"""Served models: config → :class:`app.engine.generation.ModelRoute` with live backends.

:meth:`Registry.route` is the one door of generation: it refuses a model of ``kind =
"embedding"`` (400 ``model_not_supported``, param ``model``) for every API at once;
:meth:`Registry.lookup` finds a model of any kind (embeddings, the model list)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import httpx

from adapters.base import Backend
from adapters.llamacpp import LlamaCppBackend
from adapters.ollama import OllamaBackend
from adapters.openai_chat import OpenAIChatBackend
from adapters.routing import ReplicaPool, RetryPolicy
from adapters.vllm import VLLMBackend
from app.config import GatewayConfig, ModelConfig, UpstreamSettings
from app.core.conversation import GenerationParams
from app.core.errors import InvalidRequest, ModelNotFound
from app.engine import machine_gate
from app.engine.admission import Admission, ReplicaGate, bound_replicas
from app.engine.generation import ModelRoute
from app.formats.catalog import (
    BackendTemplateFormat,
    ChatFormat,
    HarmonyFormat,
    OpenChatMLFormat,
    PromptFormat,
    TemplateFormat,
)
from app.formats.harmony.render import HarmonyOptions
from app.formats.openchatml.render import OpenChatMLOptions

BackendFactory = Callable[[str, ModelConfig, httpx.AsyncClient, RetryPolicy], Backend]
BACKENDS: dict[str, BackendFactory] = {
    "llamacpp": lambda name, cfg, client, policy: LlamaCppBackend(client, cfg.base_urls, policy,
                                                                    gguf=cfg.gguf),
    "vllm": lambda name, cfg, client, policy: VLLMBackend(
        client, cfg.base_urls, cfg.upstream_model or name, policy),
    "ollama": lambda name, cfg, client, policy: OllamaBackend(
        client, cfg.base_urls, cfg.upstream_model or name, policy),
    "openai": lambda name, cfg, client, policy: OpenAIChatBackend(
        client, cfg.base_urls, cfg.upstream_model or name, policy, api_key=cfg.api_key),
}


def make_backend(name: str, cfg: ModelConfig, client: httpx.AsyncClient,
                 up: UpstreamSettings) -> Backend:
    policy = RetryPolicy(max_attempts=up.max_attempts, backoff=up.retry_backoff,
                         cooldown=up.cooldown_seconds, first_byte_timeout=up.first_byte_timeout,
                         attempt_timeout=up.attempt_timeout)
    factory = BACKENDS.get(cfg.backend)
    if factory is None:
        raise ValueError(f"unknown backend kind {cfg.backend!r}")
    return factory(name, cfg, client, policy)


# The special tokens each built-in template is rendered with, unless the config sets them.
BUILTIN_TOKENS: dict[str, tuple[str, str]] = {"gemma3": ("<bos>", "<eos>")}


def builtin_template(name: str) -> str:
    """A chat template shipped in ``app/templates`` (``gemma3``, ...)."""
    resource = files("app").joinpath("templates", f"{name}.jinja")
    if not name.replace("-", "").replace("_", "").isalnum() or not resource.is_file():
        raise ValueError(f"no built-in chat template named {name!r}")
    return resource.read_text(encoding="utf-8")


def _harmony(name: str, cfg: ModelConfig, backend: Backend) -> PromptFormat:
    return HarmonyFormat(HarmonyOptions(
        model_identity=cfg.harmony.model_identity,
        knowledge_cutoff=cfg.harmony.knowledge_cutoff,
        current_date=cfg.harmony.current_date,
        default_reasoning_effort=cfg.defaults.reasoning_effort or "medium",
    ))


def _openchatml(name: str, cfg: ModelConfig, backend: Backend) -> PromptFormat:
    return OpenChatMLFormat(OpenChatMLOptions(
        model=name, model_identity=cfg.harmony.model_identity,
        knowledge_cutoff=cfg.harmony.knowledge_cutoff, current_date=cfg.harmony.current_date,
        default_reasoning_effort=cfg.defaults.reasoning_effort or "medium",
        document_header=cfg.openchatml.document_header,
    ), require_channels=cfg.openchatml.require_channels)


def _template(name: str, cfg: ModelConfig, backend: Backend) -> PromptFormat:
    t = cfg.template
    if t.from_backend:
        if not isinstance(backend, LlamaCppBackend):
            raise ValueError("template.from_backend needs a llamacpp backend")
        return BackendTemplateFormat(backend.chat_template)
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


FORMATS: dict[str, Callable[[str, ModelConfig, Backend], PromptFormat]] = {
    "harmony": _harmony, "openchatml": _openchatml, "template": _template,
    "chat": lambda name, cfg, backend: ChatFormat(),
}


def make_format(name: str, cfg: ModelConfig, backend: Backend) -> PromptFormat:
    factory = FORMATS.get(cfg.prompt_format or "harmony")
    if factory is None:
        raise ValueError(f"unknown prompt format {cfg.prompt_format!r}")
    return factory(name, cfg, backend)


class Registry:
    def __init__(self, config: GatewayConfig, client: httpx.AsyncClient,
                 admission: Admission | None = None) -> None:
        self.config = config
        self.created = 0
        self.routes: dict[str, ModelRoute] = {}
        lim = config.limits
        self.admission = admission or Admission(lim.max_inflight or config.upstream.max_connections,
                                                lim.max_queue, lim.queue_timeout)
        self.gates: dict[str, ReplicaGate] = {}  # per upstream URL: its bound (max_inflight)
        # serve --workers N without Redis: each replica's slots are the machine's (gate service)
        self.gate_client = machine_gate.from_environment()
        make = (functools.partial(machine_gate.MachineGate, client=self.gate_client)
                if self.gate_client is not None else ReplicaGate)
        for name, cfg in config.models.items():
            backend = make_backend(name, cfg, client, config.upstream)
            pool = getattr(backend, "pool", None)
            if cfg.kind == "chat" and isinstance(pool, ReplicaPool):
                bound_replicas(pool, self.gates, fixed=cfg.max_inflight,
                               read_slots=getattr(backend, "total_slots", None),
                               margin=cfg.inflight_margin, max_queue=lim.max_queue,
                               queue_timeout=lim.queue_timeout, make=make)
            self.routes[name] = ModelRoute(
                name=name,
                backend=backend,
                format=make_format(name, cfg, backend),
                context_window=cfg.context_window,
                default_reasoning_effort=cfg.defaults.reasoning_effort or "medium",
                admission=self.admission,
            )

    def pools(self) -> list[ReplicaPool]:
        """The upstream replica pools of every model (one per backend)."""
        found = (getattr(route.backend, "pool", None) for route in self.routes.values())
        return list({id(p): p for p in found if isinstance(p, ReplicaPool)}.values())

    def share_cooldowns(self, publish: Callable[[str, float], None]) -> None:
        for pool in self.pools():
            pool.on_fail = publish

    def cool(self, url: str, seconds: float) -> None:
        """Another worker or replica found ``url`` failing: skip it for ``seconds`` and read its
        slots again (it may come back restarted with other slots)."""
        for pool in self.pools():
            pool.cool(url, seconds)
        gate = self.gates.get(url)
        if gate is not None:
            gate.failed_elsewhere()

    def canonical(self, model: str) -> str:
        """The model an alias (``[aliases]``) stands for; any other name as it is."""
        return self.config.aliases.get(model, model)

    def lookup(self, model: str) -> ModelRoute:
        """The served model of any kind (``/v1/embeddings``, ``/v1/models/{id}``, the knowledge
        embedder); an unknown one is a 404."""
        try:
            return self.routes[model]
        except KeyError:
            raise ModelNotFound(f"The model {model!r} does not exist.", param="model") from None

    def route(self, model: str) -> ModelRoute:
        """The model a generation runs on (every API that generates asks here, before anything
        reaches a backend): unknown is a 404, a ``kind = "embedding"`` model a 400
        ``model_not_supported``."""
        route = self.lookup(model)
        if self.config.models[model].kind == "embedding":
            raise InvalidRequest(f"The model {model!r} is an embedding model: it serves "
                                 "/v1/embeddings only, not text generation.", param="model",
                                 code="model_not_supported")
        return route

    def with_defaults(self, model: str, params: GenerationParams) -> GenerationParams:
        d = self.config.models[model].defaults
        temperature = params.temperature if params.temperature is not None else d.temperature
        top_p = params.top_p if params.top_p is not None else d.top_p
        max_tokens = params.max_tokens if params.max_tokens is not None else d.max_tokens
        effort = params.reasoning_effort or d.reasoning_effort
        if temperature is params.temperature and top_p is params.top_p \
                and max_tokens is params.max_tokens and effort is params.reasoning_effort:
            return params  # nothing to fill in (a replace() costs ~6 µs a request)
        return replace(params, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                       reasoning_effort=effort)
