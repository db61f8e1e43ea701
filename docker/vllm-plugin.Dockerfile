# syntax=docker/dockerfile:1
# vLLM 0.33's serving image with kvplan's vLLM plugins (the kvplan-vllm wheel) added, and nothing else.
#
# The wheel depends only on what the vLLM image already has (vllm, prometheus-client; the rest is the standard
# library), so it is installed with --no-deps: pip can change nothing of vLLM's environment.
# tests/vllm/test_plugin_dist_install.py installs the same wheel into the hash-pinned vLLM 0.33.0 environment and
# checks that it adds no other package.
#
# Build, with the folder that holds the wheel as the build context (`make release` writes it to out/release/plugin/):
#   docker build -f docker/vllm-plugin.Dockerfile -t <registry>/vllm-openai-kvplan:v0.33.0-kvplan0.1.0 \
#     out/release/plugin
# The release also pushes the wheel itself to its local registry (kvplan-vllm-wheel:<version>, one layer holding
# /wheels/<wheel>); `crane export` of it gives the wheel back.

ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0

FROM ${VLLM_IMAGE}
ARG WHEEL=kvplan_vllm-0.1.0-py3-none-any.whl
COPY ${WHEEL} /tmp/kvplan-wheel/
RUN python3 -m pip install --no-cache-dir --no-deps --no-index /tmp/kvplan-wheel/*.whl \
    && rm -rf /tmp/kvplan-wheel
