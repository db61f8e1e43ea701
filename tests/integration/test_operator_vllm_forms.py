"""The issue's six shell forms of a vLLM container on the real apiserver (issue 26, item 5): before, 5 of 6 ended
with ``Applied=True`` and status saying TP 4 where vLLM would run TP 8 or TP 1. Now each either ends applied with
the Deployment, as stored by the apiserver and run by the real shell under argv-recording stubs, giving vLLM the
TP and PP status claims (read by the unit tier's model of vLLM's parser; the vLLM tier reads the same forms with
vLLM 0.33's own), or is refused (``UnsupportedContainerLayout``) with the Deployment untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan_operator import conditions as C
from operator_world import (backfill, cond, create_kvplan, deployment, fetch, kvplan_spec,  # type: ignore
                            run)
from vllm_flag_cases import CASES, stubs, vllm_invocations, vllm_like  # type: ignore[import-not-found]

pytestmark = pytest.mark.integration

ISSUE_FORMS = ["sh-later-short-tp-wins", "sh-underscores", "sh-abbreviation", "sh-flag-in-comment",
               "sh-echo-vllm-serve", "sh-pass-on-to-another-command"]


@pytest.mark.parametrize("case_id", ISSUE_FORMS)
def test_issue_forms_on_the_real_apiserver(case_id, crd, kube_api, kube, namespace, prometheus, traces_dir,
                                           tmp_path: Path):
    from kubernetes import client

    case = CASES[case_id]
    backfill(prometheus, traces_dir)
    apps = client.AppsV1Api(kube_api)
    for name in ("vllm-a", "vllm-b"):
        body = deployment(name)
        if name == "vllm-a":
            vllm = body["spec"]["template"]["spec"]["containers"][0]
            vllm["command"], vllm["args"] = case.command, case.args
        apps.create_namespaced_deployment(namespace, body)
    create_kvplan(kube_api, namespace, kvplan_spec(prometheus.url))
    before = kube.get_deployment(namespace, "vllm-a")["metadata"]["resourceVersion"]
    out = run(kube, namespace)
    if case.expect == "refuse":
        assert out.reason == C.UNSUPPORTED_CONTAINER_LAYOUT and "Deployment vllm-a" in out.message, out
        assert kube.get_deployment(namespace, "vllm-a")["metadata"]["resourceVersion"] == before
        assert cond(fetch(kube, namespace), C.APPLIED)["reason"] == C.UNSUPPORTED_CONTAINER_LAYOUT
        return
    assert out.ok, out
    claimed = fetch(kube, namespace)["status"]["plan"]["groups"]["pool-a"]
    stored = next(c for c in kube.get_deployment(namespace, "vllm-a")["spec"]["template"]["spec"]["containers"]
                  if c["name"] == "vllm")
    runs = vllm_invocations(stored.get("command") or [], stored.get("args") or [], stored.get("env") or [],
                            stubs(tmp_path / "bin"), tmp_path / "argv.jsonl")
    assert len(runs) == 1, runs
    ns = vllm_like(runs[0])
    assert (ns.tensor_parallel_size, ns.pipeline_parallel_size) == (claimed["tp"], claimed["pp"]), (runs, claimed)
