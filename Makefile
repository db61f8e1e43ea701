# kvplan: the two commands are `make demo` and `make test`. Both set up everything from nothing.
SHELL := /bin/bash
# The folder operator/ would shadow the standard library's `operator` for any Python started with the repo root
# on sys.path (python -m from here, setup.py builds). PYTHONSAFEPATH (Python >= 3.11) keeps the cwd off sys.path.
export PYTHONSAFEPATH := 1
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv tools vllm-env demo test test-unit test-integration test-e2e test-vllm parity bench lint-chart typecheck clean

$(STAMP): pyproject.toml setup.py
	command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (kvplan needs Python 3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[operator,test]'
	touch $@

venv: $(STAMP)

# System tools from the package registries: Debian's prometheus and etcd-server, kube-apiserver built from the
# Go module k8s.io/kubernetes into ~/.cache/kvplan (cached by version), helm from its Go module.
tools: venv
	$(VENV)/bin/kvplan-dev tools ensure

# vllm==0.33.0 and its whole hash-pinned dependency set (requirements/vllm-0.33.0.lock) in its own venv under
# ~/.cache/kvplan/vllm-0.33.0 ($KVPLAN_CACHE), installed once under a file lock. First time: ~4.3 GB download,
# 9.4 GB disk, ~10 min (README, "The vLLM environment"); then instant.
vllm-env: venv
	$(VENV)/bin/kvplan-dev tools ensure --vllm

# The main job on the embedded default: local control plane + Prometheus backfilled from a bundled trace,
# the operator, the example KVPlan; prints the plan and what changed; stops everything it started.
demo: tools
	$(VENV)/bin/kvplan-dev demo

# The full test suite: unit, typecheck/layering, integration (real apiserver+etcd, real Prometheus), e2e, and the
# vllm tier (kvcore's engine model against vLLM 0.33's own scheduler on CPU).
test: tools vllm-env
	$(VENV)/bin/pytest tests

test-unit: venv
	$(VENV)/bin/pytest tests/unit

test-integration: tools
	$(VENV)/bin/pytest -m integration tests

test-e2e: tools
	$(VENV)/bin/pytest -m e2e tests

test-vllm: vllm-env
	$(VENV)/bin/pytest -m vllm tests

# kvcore's vLLM engine model against vLLM 0.33's own Scheduler on 260 seeded cases; prints one JSON line
# {"cases": N, "identical": M, "mismatches": [...], "vllm": "0.33.0", ...} (progress on stderr).
parity: vllm-env
	$(PY) -m kvplan_dev.parity

bench: venv
	$(VENV)/bin/python benchmarks/run_all.py

lint-chart: tools
	$(VENV)/bin/kvplan-dev helm -- lint charts/kvplan-operator

# Copy crds/ (the one CRD source) into the chart byte for byte; tests/unit/test_chart_crds.py checks the copy.
.PHONY: sync-crds
sync-crds: venv
	$(PY) scripts/sync_crds.py

typecheck: venv
	$(VENV)/bin/mypy kvcore

clean:
	rm -rf $(VENV) build *.egg-info
