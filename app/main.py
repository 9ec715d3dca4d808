"""The application: the APIs' routers, middleware, error rendering and lifespan (one shared
upstream connection pool, the run engine, the response store)."""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from adapters.upstream import PooledClient
from app.api.admin import console
from app.api.admin import keys as admin_keys
from app.api.admin import ops as admin_ops
from app.api.admin.live import error_rows, model_rows
from app.api.batches import routes as batches_routes
from app.api.chat import routes as chat_routes
from app.api.chat import sagemaker
from app.api.chat import stored_routes as chat_stored_routes
from app.api.chat.stored import ChatStore
from app.api.completions import routes as completions_routes
from app.api.conversations import routes as conversations_routes
from app.api.files import routes as files_routes
from app.api.files.service import FilesService
from app.api.messages import routes as messages_routes
from app.api.responses import routes as responses_routes
from app.api.responses import websocket as responses_websocket
from app.api.responses.service import ResponsesService
from app.api.vector_stores import routes as vector_stores_routes
from app.batches.postgres_batches import PostgresBatchStore
from app.batches.runner import BatchRunner, RunnerSettings
from app.batches.sqlite_batches import SqliteBatchStore
from app.config import GatewayConfig, load_config
from app.core import tracing
from app.engine.admission import Admission
from app.engine.engine import Engine
from app.engine.machine_signals import MachineSignals
from app.engine.machine_signals import from_environment as machine_signals_from_env
from app.engine.registry import Registry
from app.engine.signals import RedisSignals
from app.formats.harmony.vocab import harmony_encoding
from app.http import errors, internal, openapi, routes_meta
from app.http.anthropic import AnthropicErrors
from app.http.auth import AuthMiddleware
from app.http.counters import Counters, RedisCounters
from app.http.keys import KeyResolver, share_changes
from app.http.limits import LimitsMiddleware
from app.http.machine_counters import from_environment as machine_counters_from_env
from app.http.machine_metrics import from_environment as machine_metrics_from_env
from app.http.machine_metrics import run_rows
from app.http.multipart import OVERHEAD as UPLOAD_OVERHEAD
from app.http.observe import RECENT_ERRORS, ObserveMiddleware
from app.http.startup_log import during_startup, started
from app.http.usage import Budgets, UsageRecorder
from app.knowledge.service import open_knowledge
from app.metrics import Metrics
from app.stores import open_stores, retain, sweep_files
from app.tools.code import Sandbox
from app.tools.search_index import OfflineIndex, open_search
from app.tools.search_searxng import SearxngSearch

YOUNG_COLLECTION = 50_000  # gc's generation-0 threshold while the gateway serves (gc's own: 700)


def create_app(config: GatewayConfig | None = None,
               transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """Build the gateway.  ``transport`` replaces the network (tests use MockTransport)."""
    startup = during_startup()  # serve --workers N: a start-up warning once, not per worker
    cfg = config if config is not None else load_config()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        harmony_encoding()  # load the vocabulary before the first request, not during it
        up = cfg.upstream
        limits = httpx.Limits(max_connections=up.max_connections,
                              max_keepalive_connections=up.max_connections)
        timeout = httpx.Timeout(connect=up.connect_timeout, read=up.read_timeout,
                                write=up.connect_timeout, pool=up.connect_timeout)
        client = (PooledClient(limits, timeout) if transport is None  # aiohttp, adapters/upstream.py
                  else httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits))
        registry = Registry(cfg, client, admission)
        registry.created = int(time.time())
        app.state.metrics.watch_admission(admission)
        app.state.metrics.watch_replicas(registry.routes)
        # serve --workers N: /metrics adds up every worker's counts (app/http/machine_metrics.py)
        app.state.machine_metrics = machine_metrics = machine_metrics_from_env(app.state.metrics.registry)
        relay = asyncio.get_running_loop().create_task(machine_metrics.run()) if machine_metrics else None
        app.state.registry = registry
        stores = await open_stores(cfg.store.path, cfg.store.url)
        store, conversations = stores.responses, stores.conversations
        app.state.accounts = resolver.store = usage.store = stores.accounts
        app.state.chat_store = stores.chat or await ChatStore.open(stores.local)  # stored chat completions
        app.state.engine = engine = Engine(registry)
        if machine_metrics is not None:  # the console's live views, from every worker
            machine_metrics.views["runs"] = lambda: run_rows(engine)
            machine_metrics.views["errors"] = lambda: error_rows(app.state.recent_errors)
            machine_metrics.views["models"] = lambda: model_rows(registry)
        assert stores.files is not None
        app.state.files = FilesService(stores.files, cfg.files.max_bytes)
        search = await open_search(cfg.tools)
        code = cfg.tools.code_interpreter
        sandbox = (Sandbox(code.url.rstrip("/"), httpx.AsyncClient(
            timeout=httpx.Timeout(code.timeout, connect=10.0)), code.token) if code.url else None)
        # between replicas: Redis; between the workers of serve --workers N: the machine's hub
        signals = (RedisSignals(app.state.redis) if getattr(app.state, "redis", None) is not None
                   else machine_signals_from_env())
        app.state.responses = ResponsesService(engine, store, conversations, search, sandbox, signals)

        def cancel_here(run_id: str) -> None:  # a cancel published by another replica
            run = engine.find(run_id)
            if run is not None:
                run.cancel()

        listener = (asyncio.get_running_loop().create_task(signals.listen(cancel_here, registry.cool))
                    if signals is not None else None)
        # a key revoked or changed through /admin/keys: forgotten by every worker / replica at once
        key_listener = share_changes(resolver, signals, getattr(app.state, "redis", None))
        if isinstance(signals, MachineSignals):  # /admin/usage: every worker flushes first
            signals.asks.handlers["usage"] = lambda _: usage.flush()
        if signals is not None:  # upstream replicas found failing: every gateway skips them
            registry.share_cooldowns(signals.cooldown)
        if signals is not None:  # background runs' events, for readers on other replicas
            engine.mirror = signals.mirror
        app.state.conversations = app.state.responses.conversations
        app.state.responses.files = app.state.conversations.files = stores.files
        knowledge = await open_knowledge(stores, cfg, lambda model: registry.lookup(model).backend)
        app.state.knowledge = knowledge  # /v1/vector_stores (app/knowledge/service.py)
        app.state.responses.knowledge = knowledge  # file_search (app/tools/file_search.py)
        knowledge.start()  # vector-store ingestion and expiry, in the background (app/knowledge/ingest.py)
        app.state.batches = (PostgresBatchStore(stores.pool) if stores.pool is not None
                             else await SqliteBatchStore.open(stores.local))
        app.state.batch_runner = runner = _batch_runner(app, cfg, admission, registry)
        batch_worker = asyncio.get_running_loop().create_task(runner.run()) if runner else None
        heartbeat = asyncio.get_running_loop().create_task(app.state.responses.heartbeat())
        retention = asyncio.get_running_loop().create_task(retain(stores, cfg.store))
        file_sweep = asyncio.get_running_loop().create_task(sweep_files(stores, cfg.files.sweep_seconds))
        flusher = asyncio.get_running_loop().create_task(usage.run()) if cfg.usage.enabled else None
        # What imports and start-up made (~143,000 objects: modules, pydantic schemas) lives as
        # long as the process. Out of the collector's sight, a full collection scans only what
        # requests made: ~10 ms instead of 45-70 ms with every request and /health held
        # (benchmarks/RESULTS.md, hostile requests).
        gc.freeze()
        # A young collection every 50,000 allocations, not 700: in a burst of streams what each
        # allocates lives until it ends, and at 700 it was promoted into full collections
        # (1,000 streams at once: 0.1-0.26 s of GC CPU per worker; burst CPU x0.89-0.94 with
        # 50,000, benchmarks/RESULTS.md, b40u). Restored when the app stops (tests run many).
        thresholds = gc.get_threshold()
        gc.set_threshold(YOUNG_COLLECTION, *thresholds[1:])
        started(startup)
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            heartbeat.cancel()
            if batch_worker is not None:  # lines in flight are cancelled; others retake them
                batch_worker.cancel()
                await asyncio.gather(batch_worker, return_exceptions=True)
            retention.cancel()
            file_sweep.cancel()
            await knowledge.close()  # ingestion jobs in flight are given back
            if flusher is not None:
                flusher.cancel()
            if listener is not None:
                listener.cancel()
            if key_listener is not None:
                key_listener.cancel()
            await engine.shutdown(within=10)  # runs persist their final state before the store closes
            if isinstance(signals, MachineSignals):  # after the runs' last events are copied
                signals.close()
            if relay is not None and machine_metrics is not None:  # its final counts, kept
                relay.cancel()
                machine_metrics.close()
            await usage.flush()  # the last counts, before the store closes
            tracing.flush()
            await stores.close()
            if getattr(app.state, "redis", None) is not None:
                await app.state.redis.aclose()
            if isinstance(search, OfflineIndex):
                search.close()
            elif isinstance(search, SearxngSearch):
                await search.aclose()
            if sandbox is not None:
                await sandbox.client.aclose()
            await client.aclose()

    app = FastAPI(title="ocm-gateway", lifespan=lifespan, redoc_url=None,
                  docs_url="/docs" if cfg.http.docs else None)
    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    # The hot POST routes first: Starlette tries each route in order until one matches, and
    # /v1/messages 12th of 14 routers cost ~130 µs of matching per request (issue 40); Messages
    # (2 routes) before Responses (8): /v1/messages no longer walks Responses' routes (issue 37).
    routers = [chat_routes.router, messages_routes.router, responses_routes.router,
               routes_meta.router, sagemaker.router, completions_routes.router,
               responses_websocket.router, conversations_routes.router, chat_stored_routes.router,
               files_routes.router, admin_keys.router, admin_ops.router, batches_routes.router,
               vector_stores_routes.router]
    if cfg.admin.console:
        routers.append(console.router)
    errors.install(app, routers)
    lim = cfg.limits  # one admission controller per process, shared by every model
    admission = Admission(lim.max_inflight or cfg.upstream.max_connections, lim.max_queue,
                          lim.queue_timeout)
    counters: Counters | None = None
    if cfg.redis.url:  # limits shared by every replica
        import redis.asyncio as aioredis

        app.state.redis = aioredis.from_url(cfg.redis.url, socket_timeout=2.0, socket_connect_timeout=2.0)
        counters = RedisCounters(app.state.redis, on_failure=cfg.redis.on_failure,
                                 lease_seconds=cfg.redis.lease_seconds)
    else:  # serve --workers N: the machine's counter service, if serve started one
        counters = machine_counters_from_env(cfg.redis.lease_seconds)
    app.state.config = cfg
    tracing.configure()  # OTEL_* in the environment: spans over OTLP (app/core/tracing.py)
    usage = UsageRecorder(cfg.usage)
    resolver = KeyResolver(None, cfg.auth.key_cache_seconds)
    app.state.usage, app.state.key_resolver = usage, resolver
    app.state.recent_errors = collections.deque(maxlen=RECENT_ERRORS)
    app.add_middleware(LimitsMiddleware, settings=cfg.limits, admission=admission, counters=counters,
                       budgets=Budgets(usage, cfg.usage.budget_refresh_seconds),  # inside auth
                       streamed={"/v1/files": cfg.files.max_bytes + UPLOAD_OVERHEAD},
                       models={**{name: name for name in cfg.models}, **cfg.aliases})
    if cfg.auth.keys or cfg.admin.key_sha256:  # with an admin key, keys can be made at any time
        app.add_middleware(AuthMiddleware, keys=cfg.auth.keys, resolver=resolver)
    if cfg.http.cors_origins:  # outside auth: a browser's preflight carries no API key
        app.add_middleware(CORSMiddleware, allow_origins=cfg.http.cors_origins,
                           allow_credentials=cfg.http.cors_allow_credentials,
                           allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                           allow_headers=["authorization", "content-type", "x-request-id",
                                          "openai-beta", "openai-organization", "openai-project",
                                          "x-api-key", "anthropic-version", "anthropic-beta"],
                           expose_headers=["x-request-id", "request-id", "retry-after",
                                           "retry-after-ms"])
    app.add_middleware(AnthropicErrors)  # inside observe (the request id), outside auth and limits
    app.state.metrics = Metrics()
    app.add_middleware(ObserveMiddleware, metrics=app.state.metrics,  # outermost: sees 401s too
                       usage=usage if cfg.usage.enabled else None, errors=app.state.recent_errors)
    for router in routers:
        app.include_router(router)
    return app


def _batch_runner(app: FastAPI, cfg: GatewayConfig, admission: Admission,
                  registry: Registry) -> BatchRunner | None:
    """The batch worker: at most ``[batches] share`` of the generation slots, no new line while
    interactive requests queue or would find fewer than ``reserve`` slots free (the last
    ``min(share, 1 - share)`` of ``max_inflight`` are interactive ones), nor while a bounded
    replica (a llama.cpp server's ``total_slots``) is full or has requests waiting for it, so
    batch lines take only a backend's free slots; each line through the app's own route as the
    batch's key."""
    b = cfg.batches
    if not b.enabled:
        return None

    async def dispatch(key_digest: str | None, path: str, body: bytes) -> tuple[int, bytes]:
        return await internal.call(app, path, body, key_digest=key_digest, batch="1")

    settings = RunnerSettings(slots=max(1, int(admission.max_inflight * b.share)),
                              poll_seconds=b.poll_seconds, lease_seconds=b.lease_seconds,
                              max_attempts=b.max_attempts, backoff_seconds=b.backoff_seconds,
                              max_lines=b.max_lines, max_line_bytes=cfg.limits.max_body_bytes)
    reserve = min(settings.slots, admission.max_inflight - settings.slots)
    return BatchRunner(app.state.batches, app.state.files.store, dispatch,
                       known_model=lambda model: registry.canonical(model) in registry.routes,
                       busy=lambda: (admission.queued > 0
                                     or admission.max_inflight - admission.inflight <= reserve
                                     or any(gate.full for gate in registry.gates.values())),
                       settings=settings)


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` (config from ``OCMGW_CONFIG`` and env)."""
    return create_app(load_config())
