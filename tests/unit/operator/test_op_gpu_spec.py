"""A KVPlan group on a GPU the catalogue does not have (``nodePool.gpuSpec``): parsed, planned on its own figures,
its pods asking for its resource on its nodes; bad figures refused at the CR path with nothing applied."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvcore import GPU_CATALOGUE
from kvcore.profiles import resolve
from kvplan_operator.decide.translate import cr_path
from kvplan_operator.spec import InvalidSpec, parse_spec

from op_targets_world import SPEC  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[3]

GH200 = {"name": "gh200-96gb", "memoryBytes": 96e9, "hbmBytesPerSecond": 4.0e12, "bf16Flops": 989e12,
         "fp8Flops": 1979e12, "interconnect": "nvlink", "interconnectBytesPerSecond": 450e9, "family": "h100",
         "resource": "example.com/gpu", "nodeLabel": "nvidia.com/gpu.product=NVIDIA-GH200-96GB-HBM3",
         "deviceName": "NVIDIA GH200 96GB HBM3"}


def _raw(**change: Any) -> dict[str, Any]:
    raw = copy.deepcopy(SPEC)
    raw["groups"][0]["nodePool"]["gpuSpec"] = {**GH200, **change}
    return raw


def _figures(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != "name"}


def test_a_gpu_spec_is_the_groups_gpu() -> None:
    from kvplan_operator.targets.deployment import gpu_resource

    spec = parse_spec(_raw())
    pool = spec.groups[0].node_pool
    assert pool.gpu_name == "gh200-96gb" and pool.gpu().memory_bytes == 96e9
    assert gpu_resource(spec.groups[0]) == "example.com/gpu"
    assert pool.selector() == {"nvidia.com/gpu.product": "NVIDIA-GH200-96GB-HBM3"}
    assert pool.gpu().vllm_max_num_seqs == 1024   # >= 70 GiB and not an A100: vLLM 0.33's get_batch_defaults
    # a node selector given wins over the label, as for catalogue GPUs
    raw = _raw()
    raw["groups"][0]["nodePool"]["nodeSelector"] = {"pool": "gh"}
    assert parse_spec(raw).groups[0].node_pool.selector() == {"pool": "gh"}
    # the other group is untouched
    assert spec.groups[1].node_pool.gpu_name == spec.groups[1].node_pool.gpu_type


def test_the_planner_gets_the_spec_and_plans_on_its_figures() -> None:
    import json

    from kvcore.planner import plan as real_plan
    from kvplan_operator.reconcile import reconcile
    from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]
    from op_reconcile_world import deps  # type: ignore[import-not-found]

    seen: list[Any] = []

    def planner(instance: Any, **kw: Any) -> Any:
        result = real_plan(instance, **kw)
        seen.append((instance, result))
        return result

    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})
    out = reconcile(kvplan(_raw(), kube), deps(kube, planner=planner))
    assert out.ok, out
    (inst, result), = seen
    assert inst.groups[0].gpu_type == "gh200-96gb"
    assert json.loads(json.dumps(inst.gpu_types)) == {"gh200-96gb": _figures(GH200)}
    group = result.groups[0]
    assert group.replicas >= 1
    # the capacity planned is the GH200's profile at the chosen layout (kvcore's, resolved independently here),
    # which no catalogue GPU has
    prof = resolve("gh200-96gb", inst.groups[0].model, group.tp, group.pp, gpus=inst.gpu_types)
    assert 0 < group.kv_capacity_tokens <= prof.kv_capacity_tokens * (1 + 1e-9)
    assert all(resolve(name, inst.groups[0].model, group.tp, group.pp).kv_capacity_tokens != prof.kv_capacity_tokens
               for name in GPU_CATALOGUE)
    sources = {g: v["capacity"].get("profileSource") for g, v in kube.status["plan"]["groups"].items()}
    assert sources == {"big": {"gpu": "gpuSpec", "model": "catalogue", "override": None},
                       "small": None}   # absent for a catalogue GPU and model with no override
    body = kube.deployments[SPEC["groups"][0]["deployment"]]
    pod = body["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GH200-96GB-HBM3"}
    limits = [c.get("resources", {}).get("limits", {}) for c in pod["containers"]]
    assert any("example.com/gpu" in lim for lim in limits), limits


@pytest.mark.parametrize(("change", "field"), [
    ({"memoryBytes": 0}, "spec.groups[0].nodePool.gpuSpec.memoryBytes"),
    ({"bf16Flops": -1.0}, "spec.groups[0].nodePool.gpuSpec.bf16Flops"),
    ({"interconnect": "infiniband"}, "spec.groups[0].nodePool.gpuSpec.interconnect"),
    ({"family": "b200"}, "spec.groups[0].nodePool.gpuSpec.family"),
    ({"nodeLabel": "no-equals"}, "spec.groups[0].nodePool.gpuSpec.nodeLabel"),
    ({"name": "H100-SXM"}, "spec.groups[0].nodePool.gpuSpec.name"),
    ({"nodeLabel": ""}, "spec.groups[0].nodePool.gpuSpec.nodeLabel"),
    ({"memoryGB": 96}, "spec.groups[0].nodePool.gpuSpec.memoryGB"),
])
def test_bad_figures_are_invalid_spec_at_the_cr_path(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_spec(_raw(**change))
    assert field in [f for f, _ in err.value.errors], err.value.errors


def test_two_groups_giving_one_name_give_one_spec() -> None:
    raw = _raw()
    raw["groups"][1]["nodePool"]["gpuSpec"] = {**GH200, "memoryBytes": 141e9}
    with pytest.raises(InvalidSpec) as err:
        parse_spec(raw)
    assert ("spec.groups[1].nodePool.gpuSpec",
            "differs from spec.groups[0].nodePool.gpuSpec of the same name 'gh200-96gb'") in err.value.errors
    raw["groups"][1]["nodePool"]["gpuSpec"] = dict(GH200)
    assert parse_spec(raw).groups[1].node_pool.gpu_name == "gh200-96gb"


def test_kvcores_gpu_errors_map_to_the_gpu_spec() -> None:
    spec = parse_spec(_raw())
    assert cr_path("gpu_types.gh200-96gb.memoryBytes", spec) == "spec.groups[0].nodePool.gpuSpec.memoryBytes"
    assert cr_path("gpu_types.gh200-96gb", spec) == "spec.groups[0].nodePool.gpuSpec"


def test_fp8_weights_on_a_gpu_spec_without_fp8_are_refused_naming_the_layouts() -> None:
    import numpy as np
    from pydantic import ValidationError

    from kvcore.history.samples import History, Samples
    from kvcore.profiles.models import CONFIGS
    from kvplan_operator.decide import _refusal
    from kvplan_operator.decide.translate import build_instance
    from kvplan_operator.observe.history import ClassObservation

    raw = _raw(fp8Flops=0)
    raw["groups"][0]["model"] = "my-8b-fp8"
    raw["groups"][0]["modelConfig"] = {**dict(CONFIGS["llama-8b"][1]), "quantization_config": {"quant_method": "fp8"}}
    spec = parse_spec(raw)
    rng = np.random.default_rng(0)
    history = History.of([Samples.from_arrays(np.round(rng.gamma(2.0, 100.0, 200))) for _ in range(6)])
    obs = {c.name: ClassObservation(c.name, history, 1200.0, 6, 1.0) for c in spec.classes}
    with pytest.raises(ValidationError) as err:
        build_instance(spec, obs)
    f = _refusal(err.value, spec)
    assert f.reason == "InvalidSpec"
    assert f.message.startswith("spec.groups[0].layouts: ") and "fp8" in f.message


@pytest.mark.parametrize("crd", [REPO / "crds" / "kvplans.kvplan.io.yaml",
                                 REPO / "charts" / "kvplan-operator" / "files" / "crds" / "kvplans.kvplan.io.yaml"])
def test_the_crds_gpu_spec_rule_lists_the_catalogue(crd: Path) -> None:
    doc = yaml.safe_load(crd.read_text())
    (version,) = [v for v in doc["spec"]["versions"] if v["storage"]]
    pool = (version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["groups"]["items"]
            ["properties"]["nodePool"]["properties"])
    gpu_spec = pool["gpuSpec"]
    (rule,) = gpu_spec["x-kubernetes-validations"]
    (placed,) = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["groups"]["items"][
        "properties"]["nodePool"]["x-kubernetes-validations"]
    assert "gpuSpec.nodeLabel" in placed["rule"] and "nodeSelector" in placed["rule"]
    assert set(re.findall(r"'([^']+)'", rule["rule"])) == set(GPU_CATALOGUE)
    # the CRD's keys are kvcore's (kvcore.profiles.gpus.gpu_from_spec), plus the name
    from kvcore.profiles.gpus import _SPEC_KEYS
    assert set(gpu_spec["properties"]) == {"name", *_SPEC_KEYS}
    assert set(gpu_spec["required"]) == {"name", "memoryBytes", "hbmBytesPerSecond", "bf16Flops"}


def test_the_profile_source_names_the_gpu_the_model_and_the_override() -> None:
    from kvcore.profiles.models import CONFIGS
    from kvplan_operator.observe.capacity import profile_source

    raw = _raw()
    raw["groups"][1]["model"] = "my-8b"
    raw["groups"][1]["modelConfig"] = dict(CONFIGS["llama-8b"][1])
    raw["profiles"] = [{"gpuType": "A100-80GB", "model": "my-8b", "tp": 1, "pp": 1, "kvCapacityTokens": 1000,
                        "throughputTokensPerSecond": 100.0},
                       {"gpuType": "A100-80GB", "model": "my-8b", "tp": 2, "pp": 1, "kvCapacityTokens": 2000,
                        "throughputTokensPerSecond": 200.0}]
    spec = parse_spec(raw)
    big, small = spec.groups
    assert profile_source(spec, big, (4, 1)) == {"gpu": "gpuSpec", "model": "catalogue", "override": None}
    assert profile_source(spec, small, (2, 1)) == {"gpu": "catalogue", "model": "modelConfig",
                                                   "override": "spec.profiles[1]"}
    assert profile_source(spec, small, None)["override"] is None


def test_a_measured_profile_may_name_a_gpu_spec_and_an_unknown_type_is_named() -> None:
    import numpy as np

    from kvcore.history.samples import History, Samples
    from kvplan_operator.decide.translate import build_instance
    from kvplan_operator.observe.capacity import profile_source
    from kvplan_operator.observe.history import ClassObservation

    raw = _raw()
    raw["profiles"] = [{"gpuType": "gh200-96gb", "model": "llama-70b", "tp": 4, "pp": 1, "kvCapacityTokens": 123456,
                        "throughputTokensPerSecond": 2000.0}]
    spec = parse_spec(raw)
    assert profile_source(spec, spec.groups[0], (4, 1))["override"] == "spec.profiles[0]"
    rng = np.random.default_rng(0)
    history = History.of([Samples.from_arrays(np.round(rng.gamma(2.0, 100.0, 200))) for _ in range(6)])
    inst = build_instance(spec, {c.name: ClassObservation(c.name, history, 1200.0, 6, 1.0) for c in spec.classes})
    prof = resolve("gh200-96gb", "llama-70b", 4, 1, inst.profiles, inst.models, inst.gpu_types)
    assert (prof.kv_capacity_tokens, prof.throughput_tokens_s, prof.reason) == (123456, 2000.0, "measured override")
    raw["profiles"][0]["gpuType"] = "gh300"
    with pytest.raises(InvalidSpec) as err:
        parse_spec(raw)
    assert [f for f, _ in err.value.errors] == ["spec.profiles[0].gpuType"]
