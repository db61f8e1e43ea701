# syntax=docker/dockerfile:1
# kvplan operator image.
#
# Two stages, so the final image carries the installed package and its runtime dependencies and nothing used to
# build them:
#   builder  turns this checkout into a wheel and collects a wheel for every runtime dependency pinned, with its
#            sha256, in requirements/operator.lock (the versions the test suite ran; numpy, scipy, highspy,
#            matplotlib and kopf all ship manylinux wheels for CPython 3.11, so no compiler is needed even here);
#   final    installs those wheels offline (--no-index) with the `operator` extra, removes the installer, and runs
#            `kvplan-operator` as an unprivileged numeric user (numeric, so Kubernetes' runAsNonRoot can verify it).
#
# Build: docker build -t ghcr.io/kvplan/kvplan-operator:0.1.0 .
# This file is for builders with a Docker daemon. `make release` builds the same image without one (a Debian base
# made by mmdebstrap, layers assembled from the same lock, crane; kvplan_dev/image.py); here the file is linted by
# hadolint in tests/unit/test_dockerfile.py.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# operator/ in the build context would shadow the standard library's `operator` if the working directory were on
# sys.path; PYTHONSAFEPATH keeps it off (the same guard as the Makefile).
ENV PYTHONSAFEPATH=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY requirements ./requirements
COPY kvcore ./kvcore
COPY operator ./operator
# One wheel per locked runtime dependency (hash-checked), then kvplan itself without resolving anything again.
RUN pip wheel --wheel-dir /wheels --require-hashes --no-deps -r requirements/operator.lock \
    && pip wheel --wheel-dir /wheels --no-deps .

FROM ${PYTHON_IMAGE}
# Must equal kvcore.__version__, the one version (tests/unit/test_version.py checks it).
ARG KVPLAN_VERSION=0.1.0
LABEL org.opencontainers.image.title="kvplan-operator" \
      org.opencontainers.image.source="https://github.com/kvplan/kvplan" \
      org.opencontainers.image.description="Distributionally robust KV-cache, layout and routing planner for vLLM fleets (kopf operator)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${KVPLAN_VERSION}"
ENV PYTHONSAFEPATH=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    HOME=/tmp
# Install offline from the builder's wheels only, then drop pip/setuptools/wheel: the running image needs no installer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links=/wheels "kvplan[operator]==${KVPLAN_VERSION}" \
    && python -m pip uninstall --yes pip setuptools wheel \
    && groupadd --system --gid 10001 kvplan \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin kvplan
USER 10001:10001
# 8080: kopf liveness probe (/healthz); 9090: Prometheus metrics. Both are set by the chart's args.
EXPOSE 8080 9090
ENTRYPOINT ["kvplan-operator"]
