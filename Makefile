# kvplan: the two commands are `make demo` and `make test`. Both set up everything from nothing.
SHELL := /bin/bash
# The folder operator/ would shadow the standard library's `operator` for any Python started with the repo root
# on sys.path (python -m from here, setup.py builds). PYTHONSAFEPATH (Python >= 3.11) keeps the cwd off sys.path.
export PYTHONSAFEPATH := 1
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The pinned, hash-checked dependency sets (uv pip compile --universal: one file for Python 3.11-3.13).
# dev.lock: kvplan[operator,test,lock] + kvplan-dev + the build backend; operator.lock: kvplan[operator] (the image).
DEV_LOCK := requirements/dev.lock
OPERATOR_LOCK := requirements/operator.lock
UV_COMPILE = $(VENV)/bin/uv pip compile --universal --python-version 3.11 --generate-hashes --quiet

.PHONY: venv tools vllm-env demo twin test test-fast test-unit test-integration test-e2e test-vllm test-pythons parity bench \
	lint-chart typecheck clean lock release

# Installs exactly the lock (--require-hashes: every file checked against its pinned sha256, nothing unpinned, no
# newer version picked up), then kvplan and kvplan-dev editable without touching the network (--no-deps,
# --no-build-isolation with the locked setuptools/wheel). --clear: a venv made before a packaging change is rebuilt from
# nothing (upgrading in place lost kvplan-dev's script when the old kvplan distribution that had owned it was removed).
$(STAMP): pyproject.toml setup.py kvplan_dev/pyproject.toml $(DEV_LOCK)
	command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (kvplan needs Python 3.11-3.13)" >&2; exit 1; }
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(DEV_LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e . -e ./kvplan_dev
	$(PY) -m pip check
	touch $@

venv: $(STAMP)

# Re-resolve both locks from pyproject.toml (newest versions allowed by its ranges); commit the result. The image's
# lock is constrained by the dev lock, so the image runs exactly the versions the test suite ran.
lock: venv
	$(UV_COMPILE) pyproject.toml kvplan_dev/pyproject.toml requirements/build.in --extra operator --extra test \
		--extra lock -o $(DEV_LOCK)
	$(UV_COMPILE) pyproject.toml --extra operator --constraint $(DEV_LOCK) -o $(OPERATOR_LOCK)

# The unit tier on every supported interpreter, each in its own venv (.venv-3.1x) built from the same lock. An
# interpreter is python3.1x from pyenv's versions when present, else on PATH; a missing one fails loudly.
PYTHON_VERSIONS ?= 3.11 3.12 3.13
test-pythons:
	set -e; for v in $(PYTHON_VERSIONS); do \
		py=$$(ls -d $(HOME)/.pyenv/versions/$$v.*/bin/python$$v 2>/dev/null | tail -1); \
		py=$${py:-$$(command -v python$$v || true)}; \
		test -n "$$py" || { echo "error: no python$$v (pyenv install $$v, or put python$$v on PATH)" >&2; exit 1; }; \
		$(MAKE) --no-print-directory PYTHON=$$py VENV=.venv-$$v venv; \
		echo "== $$py: unit tier"; .venv-$$v/bin/python --version; \
		.venv-$$v/bin/pytest -q -p no:cacheprovider tests/unit; \
	done

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

# The whole loop for real on this machine (kvplan_dev/twin): real controller-manager and scheduler, pods running
# vllm serve on CPU, Prometheus scraping them, the operator re-laying-out, a trace replayed before and after.
twin: tools vllm-env
	$(VENV)/bin/kvplan-dev twin

# The release, really, on this machine: operator image without a Docker daemon (mmdebstrap + crane), a local OCI
# registry on loopback, the chart pushed there as an OCI artifact, `helm install oci://...` by digest on the local
# control plane, and the image run with podman until the example KVPlan is Ready. Result: out/release/release.json.
release: tools
	$(VENV)/bin/kvplan-dev release

# The full test suite: unit, typecheck/layering, integration (real apiserver+etcd, real Prometheus), e2e (the
# release included), and the vllm tier (kvcore's engine model against vLLM 0.33's own scheduler on CPU); then the
# unit tier on the other supported interpreters (3.11 is .venv itself), each from the same lock.
test: tools vllm-env
	$(VENV)/bin/pytest tests
	$(MAKE) --no-print-directory test-pythons PYTHON_VERSIONS="3.12 3.13"

test-unit: venv
	$(VENV)/bin/pytest tests/unit

# The inner loop: the unit tier without the tests marked slow (each over ~5 s; they still run in test-unit and
# test). One package's tests are one path: tests/unit/kvcore/rules, tests/unit/operator, ...
test-fast: venv
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow" tests/unit

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

# Copy crds/ (the one CRD source) into the chart byte for byte; tests/unit/project/test_chart_crds.py checks the copy.
.PHONY: sync-crds
sync-crds: venv
	$(PY) scripts/sync_crds.py

# The Grafana dashboard, built with grafanalib into the chart (tests/unit/project/test_dashboard.py checks it is current).
.PHONY: dashboard
dashboard: venv
	$(PY) -m kvplan_dev.dashboard

# The chart's README from its values comments, and the Kubernetes definitions in values.schema.json from the local
# apiserver's /openapi/v2 (tests/unit/project/test_chart_readme.py, tests/e2e/test_chart_polish.py check both are current).
# docs/img/architecture.png from docs/architecture.txt (tests/unit/project/test_architecture.py checks it is current).
.PHONY: architecture
architecture: venv
	$(PY) scripts/architecture_diagram.py

.PHONY: chart-readme chart-schema
chart-readme: venv
	$(PY) scripts/chart_readme.py

chart-schema: tools
	$(PY) -m kvplan_dev.k8s_schema

typecheck: venv
	$(VENV)/bin/mypy kvcore

clean:
	rm -rf $(VENV) build *.egg-info
