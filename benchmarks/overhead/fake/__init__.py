"""A fast fake LLM upstream (llama.cpp ``llama-server`` and vLLM's OpenAI server) in raw asyncio.

``python -m benchmarks.overhead.fake`` serves two dialects on two ports (plus a control port),
hand-written HTTP/1.1 over ``asyncio.start_server``: keep-alive, ``Content-Length`` bodies and
chunked SSE streams, one SSE event per HTTP chunk as the real servers send them. Every answer is
built once per distinct request body and cached, so a request costs a header parse, a dict look-up
and one ``write`` (well over 20,000 requests/s on one core: ``--selfbench`` measures it).

Which recordings it reproduces (``tests/fixtures/wire``, copies of ``/work/shared/wire``;
``--verify`` replays them against this server and diffs status, headers and bodies, ignoring only
ids, timestamps and ``timings`` values):

* **llama.cpp** (build b1-7e4c0a9, ``Server: llama.cpp``): ``POST /completion`` with token ids,
  streamed as in ``llamacpp/03a_completion_tokenids_stream.json`` -- one
  ``data: {"index","content","tokens","stop":false,"id_slot":-1,"tokens_predicted","tokens_evaluated"}``
  event per token, the eos (``<|return|>``) with ``content: ""``, then the final ``stop: true`` event
  with ``stop_type`` (``eos``, or ``limit`` when ``n_predict`` cuts the answer, ``04d``),
  ``generation_settings``, the detokenized ``prompt``, ``tokens_cached`` and ``timings``; no
  ``[DONE]``. Non-stream as in ``02``. ``GET /health`` (``01a``), ``GET /props`` (``01b``, with
  ``n_ctx`` set by ``--n-ctx``), ``POST /tokenize`` (``06a``, ``06c``). ``Keep-Alive: timeout=5,
  max=100`` is honoured like cpp-httplib does: the 100th request on a connection is answered with
  ``Connection: close`` (``--keepalive-max``), idle connections close after 5 s.
* **OpenAI Chat Completions** as vLLM 0.32.0 serves it (``server: uvicorn``):
  ``POST /v1/chat/completions`` non-stream (``vllm/07a_chat_nonstream.json``) and stream
  (``07b``; with ``stream_options.include_usage`` ``07c``: a last ``choices: []`` chunk with
  ``usage``), ``data: [DONE]`` at the end; ``GET /v1/models`` (``01a``), ``GET /health`` (``01b``).

The model: the generated tokens are Harmony token ids, ``<|channel|>final<|message|>`` +
``--tokens`` answer tokens + ``<|return|>``, produced once at startup with the gateway's own
encoding (``harmony_encoding()`` of the ``app`` on the import path, current or older layout). The
answer text is "Hello from a scripted tiny model!" repeated and cut to ``--tokens`` tokens (7 tokens
= exactly the recorded model). The chat dialect answers with the same answer tokens + eos
(``--chat-script answer``: a plain chat model), or with the whole Harmony script rendered as vLLM
does with ``skip_special_tokens`` (``--chat-script harmony``: the recorded model, used by
``--verify``). ``--ttft`` delays the first token, ``--gap`` separates tokens (0: the whole answer in
one write).

On start it prints one JSON line with its base URLs; ``GET /stats`` on the control URL returns
counters per dialect (TCP connections accepted, open, requests per path) and the process CPU time.

Modules: :mod:`.script` (the generated tokens, settings), :mod:`.dialect` (prepared replies,
counters, HTTP framing), :mod:`.llamacpp` and :mod:`.vllm` (the two dialects), :mod:`.server` (the
asyncio servers), :mod:`.verify` (``--verify``), :mod:`.selfbench` (``--selfbench``) and
``__main__`` (the command line).
"""
