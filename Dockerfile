# syntax=docker/dockerfile:1
# ocm-gateway: multi-stage, slim, non-root; the o200k vocabulary is baked in.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY adapters ./adapters
COPY schemas ./schemas
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install '.[redis]' \
 && OCM_GATEWAY_CACHE=/opt/ocm-cache /opt/venv/bin/python -c \
    "from app.formats.harmony.vocab import harmony_encoding; harmony_encoding()"

FROM python:3.11-slim
# bubblewrap: the code interpreter's sandbox (`ocm-gateway sandbox`, compose service "sandbox")
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /var/lib/ocm-gateway --create-home ocm
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/ocm-cache /opt/ocm-cache
ENV PATH=/opt/venv/bin:$PATH \
    OCM_GATEWAY_CACHE=/opt/ocm-cache \
    OCMGW_CONFIG=/etc/ocm-gateway/gateway.toml \
    OCMGW_HOST=0.0.0.0 \
    OCMGW_PORT=8000 \
    PYTHONUNBUFFERED=1
COPY docker/gateway.toml /etc/ocm-gateway/gateway.toml
USER ocm
WORKDIR /var/lib/ocm-gateway
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"]
ENTRYPOINT ["ocm-gateway", "serve"]
