"""CRD upgrades through Helm, on the real local kube-apiserver + etcd, with the project's helm.

One story, in order (module-scoped cluster):

1. ``helm install`` of the chart as 0.1.0 shipped the API: KVPlan v1alpha1 only, stored as v1alpha1 (the current
   chart with v1beta1 removed); a KVPlan is created.
2. ``helm upgrade`` to the current chart plus a schema change (a new optional ``spec.upgradeProbe``): the CRD in the
   cluster now serves v1alpha1 and v1beta1, stores v1beta1, has the new field (a strict create that uses it is
   accepted, where before the upgrade it was refused), and the existing KVPlan survives with the same uid and spec,
   readable through both versions (conversion None: identical schemas, no webhook).
3. ``helm upgrade`` to a chart that stops serving v1alpha1 while ``status.storedVersions`` still lists it is refused
   by the chart's guard with a message naming the version; the CRD is unchanged.
4. ``helm uninstall`` leaves the CRD (``helm.sh/resource-policy: keep``) and every KVPlan.

Also: ``crds.install=false`` renders no CRD; ``crds.keep=false`` drops the keep annotation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kvplan-operator"
CRD_FILE = Path("files") / "crds" / "kvplans.kvplan.io.yaml"
CRD = "kvplans.kvplan.io"
RELEASE, NS, APP_NS = "kvp", "kvplan-system", "llm"


def _variant(tmp: Path, name: str, change: Any) -> Path:
    """A copy of the chart whose KVPlan CRD went through ``change(crd_dict)``."""
    chart = tmp / name / "kvplan-operator"
    shutil.copytree(CHART, chart)
    crd = yaml.safe_load((chart / CRD_FILE).read_text())
    change(crd)
    (chart / CRD_FILE).write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def _only(version: str) -> Any:
    def change(crd: dict[str, Any]) -> None:
        kept = [v for v in crd["spec"]["versions"] if v["name"] == version]
        kept[0]["storage"] = True
        for key in ("deprecated", "deprecationWarning"):  # 0.1.0's only version was not deprecated
            kept[0].pop(key, None)
        crd["spec"]["versions"] = kept
    return change


def _probe_field(crd: dict[str, Any]) -> None:
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["upgradeProbe"] = {"type": "string", "description": "test-only field"}


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("charts")
    return {"old": _variant(tmp, "old", _only("v1alpha1")), "new": _variant(tmp, "new", _probe_field),
            "future": _variant(tmp, "future", _only("v1beta1"))}


@pytest.fixture(scope="module")
def cluster(tools: Any) -> Iterator[Any]:
    from kvplan_dev.cluster import LocalCluster

    with LocalCluster(tools) as local:
        local.kubectl("create", "namespace", APP_NS)
        yield local


def helm(tools: Any, cluster: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(tools.helm), "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True,
                          text=True, timeout=300)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def crd(cluster: Any) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout))


def kvplan(cluster: Any, version: str, name: str = "llama-70b") -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("-n", APP_NS, "get", f"kvplans.{version}.kvplan.io", name,
                                           "-o", "json").stdout))


def _example(version: str) -> dict[str, Any]:
    """examples/kvplan-70b.yaml as ``kvplan.io/<version>`` (0.1.0's example said v1alpha1, today's v1beta1)."""
    doc = yaml.safe_load((REPO / "examples" / "kvplan-70b.yaml").read_text())
    doc["apiVersion"] = f"kvplan.io/{version}"
    return dict(doc)


def _probe_manifest(name: str, version: str) -> str:
    doc = _example(version)
    doc["metadata"]["name"] = name
    doc["spec"]["upgradeProbe"] = "reached the cluster"
    return json.dumps(doc)


def test_crd_rendering_follows_the_values(tools: Any) -> None:
    def rendered(*sets: str) -> list[dict[str, Any]]:
        argv = [str(tools.helm), "template", "r", str(CHART)]
        for item in sets:
            argv += ["--set", item]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
        return [d for d in yaml.safe_load_all(out) if isinstance(d, dict) and d["kind"] == "CustomResourceDefinition"]

    (default,) = rendered()
    assert default["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert [v["name"] for v in default["spec"]["versions"]] == ["v1alpha1", "v1beta1"]
    assert rendered("crds.install=false") == []
    (unkept,) = rendered("crds.keep=false")
    assert "helm.sh/resource-policy" not in (unkept["metadata"].get("annotations") or {})


@pytest.fixture(scope="module")
def old_install(tools: Any, cluster: Any, charts: dict[str, Path]) -> dict[str, Any]:
    helm(tools, cluster, "install", RELEASE, str(charts["old"]), "-n", NS, "--create-namespace")
    cluster.kubectl("-n", APP_NS, "apply", "-f", "-", input_text=json.dumps(_example("v1alpha1")))
    return kvplan(cluster, "v1alpha1")


def test_old_chart_stores_v1alpha1(cluster: Any, old_install: dict[str, Any]) -> None:
    live = crd(cluster)
    assert [v["name"] for v in live["spec"]["versions"]] == ["v1alpha1"]
    assert live["status"]["storedVersions"] == ["v1alpha1"]
    refused = cluster.kubectl("-n", APP_NS, "create", "--validate=strict", "-f", "-", check=False,
                              input_text=_probe_manifest("before-upgrade", "v1alpha1"))
    assert refused.returncode != 0 and "upgradeProbe" in refused.stderr, refused.stderr


@pytest.fixture(scope="module")
def upgraded(tools: Any, cluster: Any, charts: dict[str, Path], old_install: dict[str, Any]) -> dict[str, Any]:
    helm(tools, cluster, "upgrade", RELEASE, str(charts["new"]), "-n", NS)
    return crd(cluster)


def test_upgrade_brings_the_new_version_and_schema(cluster: Any, upgraded: dict[str, Any]) -> None:
    versions = {v["name"]: (v["served"], v["storage"]) for v in upgraded["spec"]["versions"]}
    assert versions == {"v1alpha1": (True, False), "v1beta1": (True, True)}
    for version in upgraded["spec"]["versions"]:
        assert "upgradeProbe" in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert upgraded["spec"].get("conversion", {}).get("strategy", "None") == "None"
    assert sorted(upgraded["status"]["storedVersions"]) == ["v1alpha1", "v1beta1"]
    created = cluster.kubectl("-n", APP_NS, "create", "--validate=strict", "-f", "-",
                              input_text=_probe_manifest("after-upgrade", "v1beta1"))
    assert "created" in created.stdout and "deprecated" not in created.stderr
    assert kvplan(cluster, "v1beta1", "after-upgrade")["spec"]["upgradeProbe"] == "reached the cluster"


def test_existing_kvplan_survives_in_both_versions(cluster: Any, old_install: dict[str, Any],
                                                   upgraded: dict[str, Any]) -> None:
    alpha, beta = kvplan(cluster, "v1alpha1"), kvplan(cluster, "v1beta1")
    old = cluster.kubectl("-n", APP_NS, "get", "kvplans.v1alpha1.kvplan.io", "llama-70b", "-o", "name")
    assert "kvplan.io/v1alpha1 KVPlan is deprecated" in old.stderr, old.stderr  # the apiserver's warning
    assert alpha["metadata"]["uid"] == beta["metadata"]["uid"] == old_install["metadata"]["uid"]
    assert alpha["spec"] == beta["spec"] == old_install["spec"]
    assert beta["apiVersion"] == "kvplan.io/v1beta1"


def test_dropping_a_stored_version_is_refused(tools: Any, cluster: Any, charts: dict[str, Path],
                                              upgraded: dict[str, Any]) -> None:
    done = helm(tools, cluster, "upgrade", RELEASE, str(charts["future"]), "-n", NS, check=False)
    assert done.returncode != 0
    assert "refusing to upgrade CustomResourceDefinition kvplans.kvplan.io" in done.stderr
    assert "stops serving v1alpha1" in done.stderr and "storedVersions" in done.stderr
    assert [v["name"] for v in crd(cluster)["spec"]["versions"]] == ["v1alpha1", "v1beta1"]


def test_uninstall_keeps_the_crd_and_the_kvplans(tools: Any, cluster: Any, upgraded: dict[str, Any]) -> None:
    helm(tools, cluster, "uninstall", RELEASE, "-n", NS)
    assert crd(cluster)["metadata"]["uid"] == upgraded["metadata"]["uid"]
    names = cluster.kubectl("-n", APP_NS, "get", "kvplans", "-o", "name").stdout.split()
    assert sorted(names) == ["kvplan.kvplan.io/after-upgrade", "kvplan.kvplan.io/llama-70b"]
