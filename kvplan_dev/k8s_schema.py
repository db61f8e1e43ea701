"""Kubernetes types for the chart's ``values.schema.json``, taken from the real kube-apiserver's ``/openapi/v2``.

The chart's Kubernetes-typed values (``resources``, ``affinity``, ``tolerations``, ``nodeSelector``,
``podSecurityContext``, ``securityContext``, ``extraEnv``, ``extraVolumes``, ``extraVolumeMounts``,
``imagePullSecrets``) are validated against the definitions the apiserver itself publishes (the one ``make tools``
builds, :data:`kvplan_dev.tools.KUBE_VERSION`), made strict the way kubeconform's ``-strict`` schemas are: every
object that lists its properties refuses other keys (so ``resources.limitz`` fails ``helm install`` naming the key).
Two types the OpenAPI document declares as plain strings take their real forms: ``Quantity`` (``cpu: 1`` and
``cpu: 100m``) and ``IntOrString``. Descriptions are dropped (the document is for validation; the types are
documented upstream).

``python -m kvplan_dev.k8s_schema`` starts a local control plane, reads ``/openapi/v2`` and rewrites the
``definitions`` with keys ``io.k8s.*`` in ``charts/kvplan-operator/values.schema.json`` (``--check``: compare only;
``--openapi FILE``: read a saved document instead). ``tests/e2e/test_chart_polish.py`` re-reads the live apiserver
and checks the chart's copy is current.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

SCHEMA = Path(__file__).resolve().parent.parent / "charts" / "kvplan-operator" / "values.schema.json"
ROOTS = (
    "io.k8s.api.core.v1.ResourceRequirements",
    "io.k8s.api.core.v1.Affinity",
    "io.k8s.api.core.v1.Toleration",
    "io.k8s.api.core.v1.PodSecurityContext",
    "io.k8s.api.core.v1.SecurityContext",
    "io.k8s.api.core.v1.EnvVar",
    "io.k8s.api.core.v1.Volume",
    "io.k8s.api.core.v1.VolumeMount",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.TopologySpreadConstraint",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
)
"""The types values.schema.json refers to; everything they reference comes along."""
REAL_FORMS: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "oneOf": [{"type": "string", "pattern": r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i?|[munkMGTPE])?$"},
                  {"type": "number"}]},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
}
PREFIX = "io.k8s."


def _strict(node: Any) -> Any:
    """Drop descriptions and vendor extensions, point $refs at local definitions, close every object with
    properties."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description" or key.startswith("x-kubernetes-"):
            continue
        out[key] = _strict(value)
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _refs(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"].rsplit("/", 1)[1]} if isinstance(node.get("$ref"), str) else set()
    for value in node.values():
        found |= _refs(value)
    return found


def definitions(openapi: dict[str, Any], roots: Sequence[str] = ROOTS) -> dict[str, Any]:
    """The strict closure of ``roots`` in an OpenAPI v2 document's definitions, sorted by name."""
    source = openapi["definitions"]
    wanted, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in source:
            raise KeyError(f"{name} is not in the apiserver's /openapi/v2 definitions")
        wanted[name] = REAL_FORMS.get(name) or _strict(source[name])
        todo += sorted(_refs(wanted[name]) - set(wanted))
    return dict(sorted(wanted.items()))


def merged(schema: dict[str, Any], k8s: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``io.k8s.*`` definitions replaced by ``k8s`` (its own definitions kept first)."""
    own = {k: v for k, v in schema.get("definitions", {}).items() if not k.startswith(PREFIX)}
    return {**schema, "definitions": {**own, **k8s}}


def dump(schema: dict[str, Any]) -> str:
    """The file's text: the chart's own part readable, the generated Kubernetes definitions one per line."""
    head = {k: v for k, v in schema.items() if k != "definitions"}
    own = {k: v for k, v in schema["definitions"].items() if not k.startswith(PREFIX)}
    k8s = {k: v for k, v in schema["definitions"].items() if k.startswith(PREFIX)}
    lines = [f"    {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in {**own, **k8s}.items()]
    body = json.dumps(head, indent=2)
    assert body.endswith("}")
    return body[:-1].rstrip() + ',\n  "definitions": {\n' + ",\n".join(lines) + "\n  }\n}\n"


def live_openapi() -> dict[str, Any]:
    """``/openapi/v2`` of a local control plane started for the purpose."""
    from kvplan_dev.cluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="kvplan-openapi-") as tmp, \
            LocalCluster(workdir=Path(tmp) / "cluster") as cluster:
        return dict(json.loads(cluster.kubectl("get", "--raw", "/openapi/v2").stdout))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvplan_dev.k8s_schema", description=__doc__.splitlines()[0])
    parser.add_argument("--openapi", type=Path, help="a saved /openapi/v2 document instead of a live apiserver")
    parser.add_argument("--check", action="store_true", help="exit 1 if values.schema.json is not current")
    args = parser.parse_args(argv)
    openapi = json.loads(args.openapi.read_text()) if args.openapi else live_openapi()
    current = json.loads(SCHEMA.read_text())
    text = dump(merged(current, definitions(openapi)))
    if args.check:
        same = SCHEMA.read_text() == text
        if not same:
            print(f"{SCHEMA}: Kubernetes definitions are not current; run `make chart-schema`", file=sys.stderr)
        return 0 if same else 1
    SCHEMA.write_text(text)
    print(f"wrote {SCHEMA}: {sum(1 for k in json.loads(text)['definitions'] if k.startswith(PREFIX))} Kubernetes "
          f"definitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
