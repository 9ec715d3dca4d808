# Shortcuts; every target runs with the project's .venv (created by `make test`).
PY := .venv/bin/python

SIDE_PY := benchmarks/.venvs/litellm/bin/python
FULL := benchmarks/results/overhead-litellm

.PHONY: test smoke ci load bench bench-hotpath bench-overhead bench-litellm-venv bench-litellm \
	bench-paced bench-plot

test:            ## ruff, mypy --strict and the whole suite (what README documents)
	./scripts/test.sh

smoke:           ## the README's quickstart and the Dockerfile's install line in fresh venvs
	./scripts/smoke.sh

ci:              ## what CI runs
	bash .ci/run

load:            ## full-size load: 1,000 and 5,000 concurrent streams (docs/reliability.md)
	$(PY) -m benchmarks.load --streams 1000 --streams 5000

bench: bench-hotpath bench-litellm bench-paced bench-plot  ## everything docs/performance.md reports (~25 min)
	$(PY) -m benchmarks.load --streams 1000 --json benchmarks/results/load-1000.json \
		> benchmarks/results/load-1000.md

bench-hotpath:   ## per-token hot-path benchmarks, no network (benchmarks/RESULTS.md)
	$(PY) -m benchmarks.bench_stream_path
	$(PY) -m benchmarks.bench_text_parsers

bench-paced:     ## a paced stream (20 ms TTFT, 200 tokens, 2 ms gap): added TTFT, with LiteLLM
	mkdir -p benchmarks/results
	$(PY) -m benchmarks.overhead --tokens 200 --ttft 0.02 --gap 0.002 --rounds 2 --requests 60 \
		--seconds 3 --stream-passthrough --litellm --json benchmarks/results/overhead-paced.json \
		> benchmarks/results/overhead-paced.md

bench-overhead:  ## gateway overhead over a fake upstream: markdown tables + every number as JSON
	mkdir -p benchmarks/results
	$(PY) -m benchmarks.overhead --json benchmarks/results/overhead.json > benchmarks/results/overhead.md
	@echo "wrote benchmarks/results/overhead.md and benchmarks/results/overhead.json"

bench-litellm-venv:  ## benchmarks/.venvs/litellm: litellm[proxy] + matplotlib, never a project dependency
	$(PY) -m benchmarks.overhead.proxy

bench-litellm:   ## bench-overhead + LiteLLM side by side, stream passthrough, 2 workers, the concurrency sweep
	mkdir -p benchmarks/results
	$(PY) -m benchmarks.overhead --litellm --workers 2 --sweep --tokens 80 --responses --responses-store \
		--json $(FULL).json > $(FULL).md
	@echo "wrote $(FULL).md and $(FULL).json"

bench-plot: bench-litellm-venv  ## docs/performance-latency.png from the sweep of bench-litellm (run first if missing)
	[ -f $(FULL).json ] || $(MAKE) bench-litellm
	$(SIDE_PY) -m benchmarks.overhead.plot $(FULL).json docs/performance-latency.png
