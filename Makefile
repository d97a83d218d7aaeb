# Hookline: the newcomer's commands. `make demo` shows the whole pipeline, `make test` runs the
# tests; both create the virtualenv and make sure a Redis answers first. The demo installs only
# Hookline and the demo extra (rich); the tests, lint and benchmarks install the dev extra.

VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
# The first Python 3.11+ on the PATH; override with `make PYTHON=/path/to/python3.12`.
PYTHON ?= $(firstword $(foreach p,python3 python3.13 python3.12 python3.11,\
	$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $(p))))
# Compiled modules cached in __pycache__ (ignored by git) even where the shell turns that off:
# every test run imports the package, and its worker subprocesses import it again (about a
# quarter of the fast tier's time without the cache).
export PYTHONDONTWRITEBYTECODE =
# The tests use their own database (15) of the local Redis unless told otherwise.
TEST_REDIS_URL := $(or $(HOOKLINE_TEST_REDIS_URL),redis://127.0.0.1:6379/15)

.PHONY: install venv redis demo test test-fast test-scale test-compat lint bench bench-schedule bench-compare \
	bench-retries bench-sealing bench-ordered bench-outbox bench-imports bench-enqueue-sizes chaos soak docs clean

install venv: $(STAMP)

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "No Python 3.11+ found: install one" \
		"(apt install python3.11-venv / brew install python@3.12) or set PYTHON=..."; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstalled only when pyproject.toml changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,otel]'
	touch $@

redis:
	scripts/ensure-redis.sh

# The documentation site, built strictly (a warning, a broken link or anchor is an error) into
# site/. The docs extra is installed once, again only when pyproject.toml changes. Run by the
# venv's python, not its script (whose first line names the python that installed it).
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[docs]'
	touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --clean

# What the demo needs and nothing more: Hookline and the demo extra (rich), into the same .venv:
# a fresh clone's `make demo` takes about 30 s in all on 2 cores, against about 2 minutes with
# the dev extra. No bytecode compiled up front (pygments alone is seconds of it): the demo
# compiles what it imports. A .venv that has the dev extra already (make install, make test)
# has the demo's too: it is used as it is.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@if [ $(STAMP) -nt pyproject.toml ]; then echo "$(VENV) has the dev extra: nothing to install"; \
	else $(BIN)/python -m pip install --disable-pip-version-check --no-compile -e '.[demo]'; fi
	touch $@

demo: $(DEMO_STAMP) redis
	$(BIN)/python -m examples.demo

test: $(STAMP)
	REDIS_URL=$(TEST_REDIS_URL) scripts/ensure-redis.sh
	scripts/ensure-chromium.sh
	scripts/ensure-prometheus.sh
	$(BIN)/pytest $(PYTEST_ARGS)

# The fast tier: pure unit tests and store tests on the real Redis, no worker processes and no
# HTTP receivers (tests/conftest.py refuses a worker fixture there), without the store tests
# that wait on a real timeout or failover (marked slow: make test runs them). About a minute.
test-fast: $(STAMP)
	REDIS_URL=$(TEST_REDIS_URL) scripts/ensure-redis.sh
	$(BIN)/pytest tests/unit tests/store -m "not slow" $(PYTEST_ARGS)

# Past one Redis: the RabbitMQ broker, Redis Sentinel failover and Redis Cluster tests alone
# (also part of `make test`). Each starts its own servers on loopback (rabbitmq vhost, redis-server
# replicas, Sentinels, a 3-master cluster) and skips, saying why, where it cannot.
test-scale: $(STAMP)
	REDIS_URL=$(TEST_REDIS_URL) scripts/ensure-redis.sh
	$(BIN)/pytest -m scale $(PYTEST_ARGS)

# The broker, crash, held-endpoint, Flower and task-event tests at each end of the celery/kombu/billiard range
# pyproject.toml declares: COMPAT=lowest (compat.SUPPORTED's lower bounds), newest (what pip
# resolves today) or all (both, the default). Each end in a throwaway virtualenv in .compat/.
COMPAT ?= all
test-compat:
	@test -n "$(PYTHON)" || { echo "No Python 3.11+ found: set PYTHON=..."; exit 1; }
	REDIS_URL=$(TEST_REDIS_URL) scripts/ensure-redis.sh
	PYTHON=$(PYTHON) PYTEST_ARGS="$(PYTEST_ARGS)" scripts/test-compat.sh $(COMPAT)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Benchmarks on private Redis servers (results in bench/results/); e.g.
# `make bench-schedule BENCH_ARGS="--retries 50000"`, `make bench-compare BENCH_ARGS=--quick`.
# bench.compare quotes the gates and schedule results, so it runs last.
bench: $(STAMP)
	$(BIN)/python -m bench.redis_cost
	$(BIN)/python -m bench.budget
	$(BIN)/python -m bench.processes
	$(BIN)/python -m bench.gates
	$(BIN)/python -m bench.schedule
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.inflight
	$(BIN)/python -m bench.console
	$(BIN)/python -m bench.sealing
	$(BIN)/python -m bench.enqueue_sizes
	$(BIN)/python -m bench.ordered
	$(BIN)/python -m bench.compare

bench-schedule: $(STAMP)
	$(BIN)/python -m bench.schedule $(BENCH_ARGS)

# Hookline beside a Celery no-op task and the naive webhook task: throughput, slow receiver,
# outage isolation, rate limit, enqueue cost, retries vs first deliveries; plots in
# bench/results/.
bench-compare: $(STAMP)
	$(BIN)/python -m bench.compare $(BENCH_ARGS)

# Part 8 of bench-compare alone: one worker's first deliveries/s beside its retries parked/s
# (target >= 0.6); e.g. `make bench-retries BENCH_ARGS="--quick --profile /tmp/prof.txt"`.
bench-retries: $(STAMP)
	$(BIN)/python -m bench.compare_retries $(BENCH_ARGS)

# Worker CPU per delivery with secrets encrypted at rest beside without (target <= 1.05).
bench-sealing: $(STAMP)
	$(BIN)/python -m bench.sealing $(BENCH_ARGS)

# send_webhook beside a plain .delay() at payloads of 100 B, 2 KB and 20 KB (target <= 1.2).
bench-enqueue-sizes: $(STAMP)
	$(BIN)/python -m bench.enqueue_sizes $(BENCH_ARGS)

# Ordered endpoints: 20,000 events on 200 keys under 503s and two kill -9 (order kept, no overlap),
# a blocked key beside the others (target >= 0.9), ordered vs unordered events/s (target >= 0.5).
bench-ordered: $(STAMP)
	$(BIN)/python -m bench.ordered $(BENCH_ARGS)

# The transactional outbox (issue 32): relay rows/s from PostgreSQL to Redis beside
# django-celery-outbox 0.4.3 (installed here, for this bench only; targets >= 5,000 rows/s and
# >= 2x), commit-to-receiver latency direct vs outbox at 50 events/s (target p50 <= +50 ms),
# and the outbox row's cost to a web transaction (target p50 <= +1 ms). Needs the local
# PostgreSQL; e.g. `make bench-outbox BENCH_ARGS="--quick"` or `BENCH_ARGS="--only relay"`.
bench-outbox: $(STAMP)
	$(BIN)/pip install -q django-celery-outbox==0.4.3
	$(BIN)/python -m bench.outbox $(BENCH_ARGS)

# A web process's import weight: a bare Celery app's first .delay() beside the first
# send_webhook (targets <= 1.1x the modules and the time), django.setup() with and without
# hookline.contrib.django (<= 30 modules added), the outbox's send_webhook_on_commit (no
# Celery); fresh processes, in turn. e.g. `make bench-imports BENCH_ARGS="--rounds 11"`.
bench-imports: $(STAMP)
	$(BIN)/python -m bench.imports $(BENCH_ARGS)

# Fault run under load on private Redis, receivers and workers: SIGKILL, SIGTERM, a Redis
# restart, scale-out, a flapping receiver (summary in bench/results/chaos.json).
chaos: $(STAMP)
	$(BIN)/python -m bench.chaos

# An hour at 100 events/s over 50 endpoints with a fault every five minutes (bench/soak.py):
# every event settled, throughput back within 30 s of each fault, memory flat. CI runs
# `bench.soak --quick` (three minutes, each fault once) in `make test`.
soak: $(STAMP)
	$(BIN)/python -m bench.soak

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build .compat site
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
	rm -f .demo-worker.log .pytest-worker-*.log .pytest-dlq-spool.jsonl
