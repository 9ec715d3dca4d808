"""Per-request overhead of the gateway on top of a fake upstream, in interleaved rounds.

``python -m benchmarks.overhead [--rounds 3] [--json out.json] [--quick]
[--tree A=PATH --tree B=PATH ...] [--workers N [--workers-nodelay]] [--litellm]
[--stream-passthrough] [--responses] [--sweep]`` starts

* the fake upstream (``benchmarks.overhead.fake``, a subprocess: llama.cpp ``/completion`` and
  vLLM-style OpenAI chat, each on its own port, answering in tens of microseconds),
* the gateway as a real ``ocm-gateway serve --config FILE`` (uvicorn, one worker) subprocess with
  a temporary config: ``gpt-oss-bench`` on the ``llamacpp`` backend with Harmony prompts, and
  ``chat-bench`` on the ``openai`` backend (passthrough), both pointing at the fake; the gateway
  runs from the source tree this file is in, or with ``--tree LABEL=PATH`` (repeatable) one
  gateway per labelled source tree (``cwd`` and ``PYTHONPATH`` = the tree, started through the
  ``ocm-gateway`` entry point its ``pyproject.toml`` names, since the layout differs between trees;
  the startup checks that ``app`` and ``adapters`` were imported from it), all against the same
  fake (which takes the Harmony encoding from the first tree),

then measures five targets:

* ``direct``: the fake's OpenAI ``/v1/chat/completions``, non-stream, no gateway;
* ``direct_llamacpp``: the fake's llama.cpp ``/completion`` stream, no gateway (the request the
  gateway's llama.cpp adapter makes);
* ``harmony`` / ``harmony_stream``: gateway, Harmony model, non-stream / ``stream: true``
  (baseline: ``direct_llamacpp``);
* ``passthrough``: gateway, OpenAI passthrough model, non-stream (baseline: ``direct``);

and optionally

* ``direct_stream`` / ``passthrough_stream`` (``--stream-passthrough``, implied by ``--litellm``):
  the same OpenAI chat with ``stream: true``, direct and through the gateway;
* ``litellm`` / ``litellm_stream`` (``--litellm``): the LiteLLM proxy (:mod:`.proxy`: its own
  virtualenv ``benchmarks/.venvs/litellm``, one worker, a generated config pointing at the fake's
  OpenAI chat) sent the gateway's passthrough requests, against the same baselines, with a
  gateway-vs-LiteLLM table (added latency, req/s, CPU per request, round by round);
* ``--workers N``: one more gateway of the first tree with N uvicorn workers (label ``LABEL-wN``),
  compared with the one-worker gateway like a second tree (``--workers-nodelay``: also one with
  ``TCP_NODELAY`` on its connections, see :mod:`.processes`);
* ``--sweep`` (:mod:`.sweep`): after the rounds, direct / passthrough / Harmony / LiteLLM at
  concurrency 1, 4, 16, 32, 64 (p50, p99, req/s, CPU per request); :mod:`.plot` draws it
  (``make bench-plot``: ``docs/performance-latency.png``, matplotlib from the side virtualenv).

Each round measures latency at concurrency 1 (``--requests`` sequential requests per target) and
then throughput at concurrency ``--concurrency`` (``--seconds`` per target), visiting the targets in
a rotated order, so drift of the shared 2-core machine hits every target alike. Differences
(gateway - baseline) and ratios (gateway / baseline) are computed within each round, then
summarised as the median over rounds with the min-max range. With ``--ttft`` / ``--gap`` the
baselines pace the same generated tokens as the gateway's upstream request, so pacing cancels out.

With several trees every gateway target is measured once per tree and round, the trees back to
back (their order rotated per round too), and the direct baselines once per round for all of
them. Each tree gets the same report; then every further tree is compared with the first one
(B vs A): differences B - A and ratios B / A of the added latency, the throughput and the
gateway's CPU time per request, again taken within each round, with the number of rounds in
which B was higher.

Per phase it also records the CPU time per request of the gateway, the fake and this client (from
``/proc``), the TCP connections the fake accepted and the requests it served (connection reuse of
the gateway's upstream pool), and it validates every answer (the full text at concurrency 1, a
cheap check under load). The gateway's JSON access log gives its own view of the time it spent
outside the upstream (``duration_ms - upstream_ms``), reported next to the measured difference.

The load generator is a minimal raw-asyncio HTTP/1.1 keep-alive client (``--client httpx`` uses
``httpx.AsyncClient`` instead, which costs 1-6 ms of CPU per request on this machine).

Output: markdown tables on stdout, progress on stderr; with ``--json FILE`` every per-round number.
The llama.cpp baseline's prompt ids come from the fake's ``/tokenize``, so this process does not
import the gateway's code (which may be a tree being edited).

Modules: :mod:`.targets` (what is measured), :mod:`.trees` (gateway source trees),
:mod:`.processes` (the fake and the gateways as subprocesses), :mod:`.proxy` (LiteLLM),
:mod:`.client` (the raw load generator), :mod:`.runner` (phases and rounds), :mod:`.sweep`
(against concurrency), :mod:`.stats` (summaries, tree and LiteLLM comparisons, the gateway's log),
:mod:`.report` (markdown), :mod:`.plot` (the sweep's PNG), ``__main__`` (the command line), and
:mod:`.fake` (the fake upstream, a package with its own command line:
``python -m benchmarks.overhead.fake``).
"""
