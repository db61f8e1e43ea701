"""``values.schema.json`` checked with the jsonschema library (helm uses another validator; the e2e tier runs helm
itself): the chart's defaults are valid; Kubernetes-typed values follow the strict definitions copied from the
apiserver's OpenAPI (kvplan_dev/k8s_schema.py), so typos and wrong types are refused with the key's path; and
realistic Kubernetes values are accepted (table-driven)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "kvplan-operator"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def _with(path: str, value: Any) -> dict[str, Any]:
    values = copy.deepcopy(DEFAULTS)
    node = values
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return values


def _errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return ["/" + "/".join(map(str, e.absolute_path)) + ": " + e.message for e in validator.iter_errors(values)]


def test_defaults_are_valid() -> None:
    assert _errors(DEFAULTS) == []


@pytest.mark.parametrize(
    ("path", "value", "where", "words"),
    [
        pytest.param("resources", {"limitz": {"cpu": "1"}}, "/resources", "'limitz'", id="resources-typo"),
        pytest.param("resources", {"limits": {"cpu": "lots"}}, "/resources/limits/cpu", "", id="quantity-garbage"),
        pytest.param("tolerations", [{"efect": "NoSchedule"}], "/tolerations/0", "'efect'", id="toleration-typo"),
        pytest.param("affinity", {"nodeAffinty": {}}, "/affinity", "'nodeAffinty'", id="affinity-typo"),
        pytest.param("imagePullSecrets", ["regcred"], "/imagePullSecrets/0", "not of type 'object'",
                     id="pull-secret-not-name-form"),
        pytest.param("extraVolumes", [{"name": "ca", "configMapp": {"name": "ca"}}], "/extraVolumes/0",
                     "'configMapp'", id="volume-typo"),
        pytest.param("extraVolumeMounts", [{"name": "ca"}], "/extraVolumeMounts/0", "'mountPath' is a required",
                     id="mount-without-path"),
        pytest.param("securityContext", {"runAsNonRoot": "yes"}, "/securityContext/runAsNonRoot", "boolean",
                     id="security-context-type"),
        pytest.param("replicaCount", "two", "/replicaCount", "integer", id="replica-type"),
        pytest.param("unknownKey", 1, "/", "'unknownKey'", id="unknown-top-level-key"),
    ],
)
def test_refused_with_the_key(path: str, value: Any, where: str, words: str) -> None:
    errors = _errors(_with(path, value))
    assert any(e.startswith(where) and words in e for e in errors), errors


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("resources", {"limits": {"cpu": 1, "memory": "1Gi"}, "requests": {"cpu": "100m"}},
                     id="quantities-int-and-string"),
        pytest.param("tolerations", [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], id="toleration"),
        pytest.param("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]}}},
                     id="node-affinity"),
        pytest.param("imagePullSecrets", [{"name": "regcred"}], id="pull-secret"),
        pytest.param("extraVolumes", [{"name": "ca", "configMap": {"name": "ca-bundle"}}], id="volume"),
        pytest.param("extraVolumeMounts", [{"name": "ca", "mountPath": "/etc/ca", "readOnly": True}], id="mount"),
        pytest.param("podDisruptionBudget", {"enabled": True, "minAvailable": "50%", "maxUnavailable": 1},
                     id="pdb-int-or-string"),
        pytest.param("extraEnv", [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                     id="env-from-secret"),
    ],
)
def test_accepted(path: str, value: Any) -> None:
    assert _errors(_with(path, value)) == []


def test_kubernetes_definitions_are_strict() -> None:
    k8s = {k: v for k, v in SCHEMA["definitions"].items() if k.startswith("io.k8s.")}
    assert "io.k8s.api.core.v1.ResourceRequirements" in k8s and len(k8s) > 50
    open_objects = [k for k, v in k8s.items() if v.get("properties") and v.get("additionalProperties") is not False]
    assert open_objects == []
