"""``ocm-gateway`` command line: parse with :func:`app.cli.parser.build_parser`, dispatch.

``serve [--config FILE] [--host] [--port] ...`` runs the gateway; ``keys ACTION`` manages API
keys; ``transcript validate|to-json FILE`` checks / converts OpenChatML transcripts; ``template
analyze FILE.jinja`` prints what the chat-template auto-parser finds in a template;
``conformance --base-url URL --model M`` runs the Open Responses / Chat Completions conformance
tests against any server; ``sandbox`` runs the code interpreter's executor
(:mod:`app.sandbox.server`).  ``main(argv)`` returns the exit status: 0 for ``--help`` and
``--version``, 2 for a usage error (argparse's message, on stderr).
"""

from __future__ import annotations

import argparse
import copy
import os
import resource
import sys

import uvicorn
from pydantic import ValidationError

from app.cli import embedded, limits_service, supervisor, workers
from app.cli.errors import config_problem
from app.cli.parser import build_parser, subparsers
from app.config import load_config
from app.http.server import MAX_HEAD, connection_cap, protocol_class
from app.http.ws_protocol import GracefulWebSocketProtocol
from app.items import sealing


def _serve(args: argparse.Namespace) -> int:
    if args.config:
        os.environ["OCMGW_CONFIG"] = os.path.abspath(args.config)
    if args.embedded:
        if args.workers not in (None, 1, workers.AUTO):
            print("ocm-gateway: --embedded runs in one process; use --workers 1", file=sys.stderr)
            return 2
        try:
            gguf, overrides = embedded.resolve(args.embedded, args.chat_template)
            name = args.model_name or (args.embedded if args.embedded in embedded.KNOWN_MODELS
                                       else gguf.stem)
            url = embedded.start(gguf, args.ctx_size, args.embedded_port)
        except embedded.EmbeddedError as exc:
            print(f"ocm-gateway: {exc}", file=sys.stderr)
            return 2
        os.environ["OCMGW_MODEL"] = name
        for key, value in overrides.items():
            os.environ[f"OCMGW__models__{name}__{key}"] = value
        os.environ[f"OCMGW__models__{name}__gguf"] = str(gguf)  # read for its token types
        os.environ["OCMGW_BACKEND_URL"] = url
        os.environ["OCMGW_BACKEND"] = "llamacpp"
        os.environ["OCMGW_CONTEXT_WINDOW"] = str(args.ctx_size)
        try:
            os.environ.update(_embedding_model(args.embedding_model,
                                               args.embedded in embedded.KNOWN_MODELS))
        except embedded.EmbeddedError as exc:
            print(f"ocm-gateway: {exc}", file=sys.stderr)
            return 2
    try:
        cfg = load_config()  # validate early: a bad config fails here with a clear message
    except OSError as exc:
        print(f"ocm-gateway: {config_problem(args.config, exc)}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a bad value: which key and why, not a traceback
        print(f"ocm-gateway: invalid configuration: {exc}", file=sys.stderr)
        return 2
    if not cfg.models:
        print("ocm-gateway: no models configured (use --config FILE, or set OCMGW_MODEL and "
              "OCMGW_BACKEND_URL)", file=sys.stderr)
        return 2
    requested, source = workers.requested(args.workers, cfg.workers,
                                          explicit="workers" in cfg.model_fields_set)
    if args.embedded and requested not in (1, workers.AUTO):
        print(f"ocm-gateway: --embedded runs in one process; {source} asks for {requested} workers",
              file=sys.stderr)
        return 2
    count, why = workers.choose(requested, store_path=cfg.store.path, store_url=cfg.store.url,
                                embedded=bool(args.embedded), source=source)
    if requested == workers.AUTO:
        print(f"ocm-gateway: {source} auto: {count} worker{'s' if count > 1 else ''} ({why})",
              file=sys.stderr)
    if count > 1 and not cfg.responses.encryption_key:  # one random key for every worker
        os.environ[sealing.SERVE_KEY_ENV] = sealing.serve_key()
    else:
        os.environ.pop(sealing.SERVE_KEY_ENV, None)
    try:  # more than one worker without Redis: per-key limits counted once for the machine
        limits_service.start(count, cfg)
    except (OSError, RuntimeError) as exc:
        print(f"ocm-gateway: {exc}", file=sys.stderr)
        return 1
    need = connection_cap(cfg) + cfg.upstream.max_connections + 256  # + store, files, logs
    soft, _ = workers.raise_open_files(need)
    if soft != resource.RLIM_INFINITY and soft < need:
        print(f"ocm-gateway: the open-files limit is {soft}, below the {need} this configuration can "
              "open per worker ([limits] max_connections + [upstream] max_connections); raise it "
              "(ulimit -n) or lower those", file=sys.stderr)
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["formatters"]["json_lines"] = {"format": "%(message)s"}
    log_config["handlers"]["json_lines"] = {"class": "logging.StreamHandler", "formatter": "json_lines",
                                            "stream": "ext://sys.stderr"}
    log_config["loggers"]["ocm_gateway"] = {"handlers": ["json_lines"], "level": args.log_level.upper()
                                            if args.log_level != "trace" else "DEBUG", "propagate": False}
    supervisor.run(  # uvicorn.run; N workers under a supervisor patient with a slow worker
        "app.main:create_app_from_env",
        log_config=log_config,
        access_log=False,  # the gateway writes its own JSON access log (logger ocm_gateway.access)
        factory=True,
        host=args.host or cfg.host,
        port=args.port or cfg.port,
        workers=count,
        log_level=args.log_level,
        lifespan="on",
        loop=args.loop,  # "auto": uvloop when installed (measured no faster here: not a dependency)
        timeout_graceful_shutdown=int(cfg.shutdown_grace_seconds) + 10,
        # [http] protocol: request heads have a deadline and a size limit, open connections a cap
        http=protocol_class(cfg.http.protocol),
        ws=GracefulWebSocketProtocol,  # on SIGTERM a socket's response ends before the 1012 close
        h11_max_incomplete_event_size=MAX_HEAD,  # request head size (h11; counted for httptools)
    )
    return 0


def _embedding_model(choice: str | None, quickstart: bool) -> dict[str, str]:
    """``--embedding-model``: the embedding model served beside the ``--embedded`` one (vector
    stores, ``file_search``), as config variables.  Unset: for a model that installs from PyPI
    (the quickstart) the default one when its package is installed, else a note (the gateway
    runs without vectors), and none for a GGUF file; ``none``: no embedding model."""
    name = choice or (embedded.DEFAULT_EMBEDDING_MODEL if quickstart else "none")
    if name == "none":
        return {}
    model = embedded.EMBEDDING_MODELS.get(name)
    if model is None:
        raise embedded.EmbeddedError(f"no embedding model named {name!r} (known: "
                                     f"{', '.join(embedded.EMBEDDING_MODELS)}, or none)")
    try:
        gguf = model.locate(name)
    except embedded.EmbeddedError as exc:
        if choice is not None:
            raise
        print(f"ocm-gateway: no embedding model, so vector stores cannot embed: {exc}",
              file=sys.stderr)
        return {}
    url = embedded.start(gguf, model.n_ctx, embedding=True)
    return embedded.embedding_settings(name, gguf, url, model)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["template"]:
        from app.cli.template import normalize

        argv = ["template", *normalize(argv[1:])]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    if args.command == "serve":
        return _serve(args)
    if args.command == "keys":
        from app.cli.keys import execute as run_keys

        return run_keys(args)
    if args.command == "conformance":
        from app.cli.conformance import run as run_conformance

        return run_conformance(args)
    if args.command == "sandbox":
        from app.sandbox.server import run as run_sandbox

        return run_sandbox(args, subparsers(parser)["sandbox"])
    if args.command == "transcript":
        from app.cli.transcript import execute as run_transcript

        return run_transcript(args)
    from app.cli.template import execute as run_template

    return run_template(args)


if __name__ == "__main__":
    raise SystemExit(main())
