# threadline — entry points. `make run` and `make test` install what they need: `make run` the
# runtime alone (plus the provider packages named by EXTRAS, e.g. EXTRAS=openai), `make test`
# the test tools, Redis, PostgreSQL, node and helm/kubectl besides.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export PATH := $(CURDIR)/.tools/bin:$(PATH)

EXTRAS ?=

.PHONY: help install install-runtime install-python install-system tools release-dry-run run test test-fast bench bench-service bench-api bench-abuse bench-store lint lock image image-test chaos kind-test

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(VENV)/.runtime: service/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e service
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -m pip install -q -e 'service[test]'
	touch $@

install-runtime: $(VENV)/.runtime  ## the Python package alone in .venv (what `make run` needs)
	$(if $(EXTRAS),$(PY) -m pip install -q -e 'service[$(EXTRAS)]')

install-python: $(VENV)/.installed  ## the Python package and test tools in .venv

install-system:  ## redis-server, PostgreSQL, podman/buildah/debootstrap, node, chromium (apt; starts or stops no service)
	scripts/install-system.sh

tools:  ## helm and kubectl into .tools/bin (nothing system-wide; put .tools/bin on your PATH)
	scripts/install-tools.sh

install: install-python install-system tools  ## everything the tests need

run: install-runtime  ## serve on the embedded default (SQLite checkpoints, built-in model); EXTRAS=openai adds a provider
	PY=$(PY) scripts/run-dev.sh

test: install  ## the whole suite against real servers (kind suite skips without Docker)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install  ## checkpointer benchmark: per-turn cost vs the in-memory saver
	$(PY) scripts/bench_checkpointers.py

bench-service: install  ## service benchmark: turns/s and latency, redis vs redis-stack
	$(PY) scripts/bench_service.py

bench-api: install  ## LangGraph API benchmark: threadline vs the floor, the seed design, langgraph dev (and Aegra); refunds and a 30-turn chat
	$(PY) scripts/bench_api.py

bench-store: install  ## long-term memory: puts/gets/searches per second and bytes per item, every backend's store
	$(PY) scripts/bench_store.py
	$(PY) scripts/bench_store.py --semantic --items 1000

bench-abuse: install  ## abuse figures of ADR 0006: bodies, history RSS, token floods, quotas and edges
	$(PY) scripts/bench_abuse.py

lint: install-python  ## ruff
	$(VENV)/bin/ruff check service tests scripts examples
	$(VENV)/bin/ruff format --check service tests scripts examples

# The provider extras of service/pyproject.toml, each locked on top of the runtime (the image's
# EXTRAS build argument installs requirements-<extra>.lock).
PROVIDERS := openai anthropic google-genai ollama
LOCK_DIR ?= $(CURDIR)/service
UV_COMPILE = $(CURDIR)/$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 \
	  --generate-hashes --custom-compile-command "make lock" -q
lock: install-python  ## re-pin service/requirements.lock and requirements-<provider>.lock (every package, hashed) from pyproject
	cd service && $(UV_COMPILE) -o $(LOCK_DIR)/requirements.lock
	cd service && for extra in $(PROVIDERS); do \
	  out=$(LOCK_DIR)/requirements-$$extra.lock; \
	  [ -s "$$out" ] || cp $(LOCK_DIR)/requirements.lock "$$out"; \
	  $(UV_COMPILE) --extra $$extra -o "$$out" || exit 1; \
	done

image:  ## build the service image (docker when present, else podman); EXTRAS=openai,anthropic adds providers
	EXTRAS=$(EXTRAS) scripts/build-image.sh

RELEASE_ARGS ?=
release-dry-run: tools  ## what the release workflow does for TAG (default v<appVersion>), building locally, pushing nothing
	scripts/release.sh --dry-run $(RELEASE_ARGS) $(TAG)

image-test: install  ## build the image and smoke-test it (readyz, uid 10001, two turns)
	scripts/image-test.sh

chaos: install  ## long local chaos soaks: /v1 (≥ 2000 turns) and the LangGraph API via langgraph-sdk (≥ 2000 runs), ≥ 30 SIGKILLs each
	CHAOS_SOAK=1 $(PY) -m pytest tests/chaos -m chaos -s $(PYTEST_ARGS)

kind-test: install  ## kind cluster e2e: chart install, pod kills, continuity verdict
	$(PY) -m pytest tests/e2e -m e2e -s $(PYTEST_ARGS)
