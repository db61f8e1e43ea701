"""One catalogue of names (``kvcore.catalogue``) against the CRD and kvcore's own tables:

1. every enum of the KVPlan CRD (``crds/`` and the chart's synced copy) that lists GPU types, models, radius kinds,
   history sources or router targets equals the catalogue's list; the GPU-type and radius-kind enums must exist
   (so this test cannot pass by finding nothing), and every ``spec.router`` key names a catalogue router target;
2. kvcore's roofline tables, radius rules and ``RadiusPolicy.kind`` hold exactly the catalogue's names;
3. every CRD GPU type plans: an instance on each type gets a roofline profile (A100-40GB included, which the CRD
   accepted before kvcore knew it), and the A100-40GB numbers follow the documented roofline from the datasheet
   figures (40,960 MiB, 1,555 GB/s), computed here by hand.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvcore import catalogue
from kvcore.profiles import GPUS, MODELS, roofline
from kvcore.profiles.gpus import CATALOGUE as GPU_CATALOGUE
from kvcore.profiles.models import CONFIGS, get_model
from kvcore.reservation.radius import RULES, RadiusPolicy

REPO = Path(__file__).resolve().parents[3]
CRDS = [REPO / "crds" / "kvplans.kvplan.io.yaml",
        REPO / "charts" / "kvplan-operator" / "files" / "crds" / "kvplans.kvplan.io.yaml"]

# CRD property name (for the radius rule: "policy" or "kind" under a "robustness" or "radius" object) -> the
# catalogue list its enum must equal
CATEGORIES: dict[str, tuple[str, ...]] = {
    "gpuType": catalogue.GPU_TYPES,
    "model": catalogue.MODELS,
    "radius.kind": catalogue.RADIUS_KINDS,
    "source": catalogue.HISTORY_SOURCES,
    "historySource": catalogue.HISTORY_SOURCES,
    "target": catalogue.ROUTER_TARGETS,
}


def _properties(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, property name, schema) of every property under ``schema``, depth first."""
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        yield here, name, sub
        yield from _properties(sub, here)
    if isinstance(schema.get("items"), dict):
        yield from _properties(schema["items"], path + "[]")


def _schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _category(path: str, name: str) -> str | None:
    parent = path.rsplit(".", 2)[-2] if path.count(".") >= 2 else ""
    if name in ("kind", "policy") and parent.lower() in ("radius", "robustness"):
        return "radius.kind"
    return name if name in CATEGORIES and name != "radius.kind" else None


@pytest.mark.parametrize("crd", CRDS, ids=["crds", "chart-copy"])
def test_crd_enums_match_the_catalogue(crd: Path) -> None:
    seen: dict[str, int] = {}
    for path, name, sub in _properties(_schema(crd), "openAPIV3Schema"):
        category = _category(path, name)
        if category is None or "enum" not in sub:
            continue
        assert tuple(sub["enum"]) == CATEGORIES[category], f"{crd.name} {path}: {sub['enum']} vs the catalogue"
        seen[category] = seen.get(category, 0) + 1
    assert seen.get("gpuType", 0) >= 1, seen  # nodePool.gpuType (profiles[].gpuType may also name a gpuSpec)
    assert seen.get("radius.kind", 0) >= 1, seen


@pytest.mark.parametrize("crd", CRDS, ids=["crds", "chart-copy"])
def test_crd_router_keys_are_catalogue_targets(crd: Path) -> None:
    router = _schema(crd)["properties"]["spec"]["properties"]["router"]["properties"]
    targets = {k for k, v in router.items() if v.get("type") == "object"}
    assert targets, "spec.router has no target objects"
    for key in targets:
        assert catalogue.CRD_ROUTER_KEYS.get(key) in catalogue.ROUTER_TARGETS, key
    model = _schema(crd)["properties"]["spec"]["properties"]["groups"]["items"]["properties"]["model"]
    assert "enum" not in model or tuple(model["enum"]) == catalogue.MODELS
    # the model is a free string in the CRD, checked by kvcore: its description names catalogue models only
    named = {m for m in ("llama-70b", "llama-8b", "llama-405b", "mixtral") if m in model["description"]}
    assert named and named <= set(catalogue.MODELS)


def test_kvcore_tables_hold_the_catalogue_names() -> None:
    assert tuple(GPUS) == catalogue.GPU_TYPES
    assert tuple(MODELS) == catalogue.MODELS
    assert tuple(RULES) == catalogue.RADIUS_KINDS
    assert typing.get_args(RadiusPolicy.model_fields["kind"].annotation) == catalogue.RADIUS_KINDS
    assert set(catalogue.CRD_ROUTER_KEYS.values()) == set(catalogue.ROUTER_TARGETS)
    assert catalogue.HISTORY_SOURCES == ("vllm", "kvplan", "llm-d", "envoy-ai-gateway", "custom")


@pytest.mark.parametrize("gpu", catalogue.GPU_TYPES)
def test_every_gpu_type_has_a_profile(gpu: str) -> None:
    # every GPU type plans the 8B; every model plans on some catalogue GPU with at most 16 GPUs per replica
    assert any(roofline(gpu, "llama-8b", tp, 1).feasible for tp in (1, 2, 4, 8)), gpu
    assert gpu in GPU_CATALOGUE and GPU_CATALOGUE[gpu].memory_bytes > 0 and GPU_CATALOGUE[gpu].source


@pytest.mark.parametrize("model", catalogue.MODELS)
def test_every_model_has_a_profile_and_provenance(model: str) -> None:
    assert any(roofline(g, model, tp, pp).feasible for g in catalogue.GPU_TYPES for tp in (1, 2, 4, 8)
               for pp in (1, 2)), model
    assert model in CONFIGS and get_model(model).source.startswith("huggingface.co/")


def test_a100_40gb_roofline_by_hand() -> None:
    # llama-8b at TP=1: (40,960 MiB x 0.90 - weights - 2 GiB - fp32 logits of a 2,048-token chunk) / (2 x 32 layers
    # x 8 KV heads x 128 x 2 B); the weights are the config's parameters at 2 bytes
    arch = get_model("llama-8b")
    logits = 2048 * arch.vocab * 4
    free = 40960 * 1024**2 * 0.90 - arch.params * 2 - 2 * 1024**3 - logits
    p = roofline("A100-40GB", "llama-8b", 1, 1)
    assert p.kv_capacity_tokens == math.floor(free / (2 * 32 * 8 * 128 * 2))
    # at batch 1 the step reads the weights: the intercept grows about as 1 / HBM bandwidth (2,039 / 1,555)
    big = roofline("A100-80GB", "llama-8b", 1, 1)
    assert 0.9 * 2039 / 1555 < p.step_t0_s / big.step_t0_s < 1.1 * 2039 / 1555
    # 70B bf16 (141 GB): 2 GPUs of 40 GB cannot hold it, 4 barely and 8 well; 4 are plenty at 80 GB
    assert not roofline("A100-40GB", "llama-70b", 2, 1).feasible
    assert roofline("A100-40GB", "llama-70b", 8, 1).feasible and roofline("A100-80GB", "llama-70b", 4, 1).feasible
