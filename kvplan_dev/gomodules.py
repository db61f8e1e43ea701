"""Files from published Go modules (the upstream Gateway API and Inference Extension CRDs), fetched with the Go
toolchain from the module proxy and cached under ``~/.cache/kvplan/gomod/<module>@<version>/``.

``go mod download -json <module>@<version>`` fetches and verifies the module zip against the checksum database
(``GOSUMDB``, on by default) into the shared module cache; the files a test needs are then copied, with the
module's LICENSE, into kvplan's cache (a file lock serialises concurrent fetches; a folder is used only once every
file is in place). Versions are pinned here, so a test always installs the same CRDs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from kvplan_dev.gobuild import BuildError, Progress, _Lock, find_go, go_env
from kvplan_dev.tools import cache_root

#: Gateway API: HTTPRoute and friends (Apache-2.0). v1.6.3 is the newest release the Go toolchain here can download
#: (v1.7.0's go.mod asks for go >= 1.27).
GATEWAY_API = ("sigs.k8s.io/gateway-api", "v1.6.3")
HTTPROUTE_CRD = "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"
#: Gateway API Inference Extension: InferencePool, inference.networking.k8s.io/v1 (Apache-2.0). v1.6.0 is the newest
#: version the module proxy serves here.
INFERENCE_EXTENSION = ("sigs.k8s.io/gateway-api-inference-extension", "v1.6.0")
INFERENCEPOOL_CRD = "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"
#: KServe: LLMInferenceService, serving.kserve.io/v1alpha2 storage with v1alpha1 served (Apache-2.0). v0.17.0 is the
#: newest version the module proxy serves here (v0.16.1 and v0.18.0 are not).
KSERVE = ("github.com/kserve/kserve", "v0.17.0")
LLMISVC_CRD = "config/crd/full/llmisvc/serving.kserve.io_llminferenceservices.yaml"
#: LeaderWorkerSet: leaderworkerset.x-k8s.io/v1 (Apache-2.0).
LWS = ("sigs.k8s.io/lws", "v0.8.0")
LWS_CRD = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
#: KEDA: the ScaledObject CRD, keda.sh/v1alpha1 (Apache-2.0); v2.21.0 is the newest version the module proxy
#: serves here. (AIBrix's PodAutoscaler CRD is not available: the proxy answers 403 for github.com/vllm-project/aibrix.)
KEDA = ("github.com/kedacore/keda/v2", "v2.21.0")
SCALEDOBJECT_CRD = "config/crd/bases/keda.sh_scaledobjects.yaml"


def module_files(module: str, version: str, files: list[str], progress: Progress = print) -> Path:
    """The folder holding ``files`` (paths inside the module) and ``LICENSE`` of ``module@version``."""
    dest = cache_root() / "gomod" / f"{module.replace('/', '_')}@{version}"
    wanted = [*files, "LICENSE"]
    if all((dest / f).is_file() for f in wanted):
        return dest
    with _Lock(dest.with_name(dest.name + ".lock"), progress):
        if all((dest / f).is_file() for f in wanted):
            return dest
        progress(f"[{module}@{version}] go mod download ...")
        done = subprocess.run([str(find_go()), "mod", "download", "-json", f"{module}@{version}"], env=go_env(),
                              capture_output=True, text=True, check=False, cwd=cache_root())
        try:
            info = json.loads(done.stdout)
        except ValueError:
            info = {}
        source = Path(info.get("Dir") or "")
        if done.returncode != 0 or info.get("Error") or not source.is_dir():
            raise BuildError(f"{module}@{version}: go mod download failed: {info.get('Error') or done.stderr}")
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        for f in wanted:
            if not (source / f).is_file():
                raise BuildError(f"{module}@{version}: {f} is not in the module")
            (staging / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / f, staging / f)
        (staging / "PROVENANCE").write_text(
            f"{module} {version}\nfetched with `go mod download` from the Go module proxy; zip hash {info.get('Sum')}\n"
            f"origin: {json.dumps(info.get('Origin') or {})}\n")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    return dest


def upstream_crds(progress: Progress = print) -> dict[str, Path]:
    """The upstream HTTPRoute (Gateway API, standard channel) and InferencePool CRD files."""
    gw = module_files(*GATEWAY_API, [HTTPROUTE_CRD], progress)
    ie = module_files(*INFERENCE_EXTENSION, [INFERENCEPOOL_CRD], progress)
    return {"httproutes": gw / HTTPROUTE_CRD, "inferencepools": ie / INFERENCEPOOL_CRD}


def workload_crds(progress: Progress = print) -> dict[str, Path]:
    """The upstream LLMInferenceService (KServe) and LeaderWorkerSet CRD files."""
    ks = module_files(*KSERVE, [LLMISVC_CRD], progress)
    lws = module_files(*LWS, [LWS_CRD], progress)
    return {"llminferenceservices": ks / LLMISVC_CRD, "leaderworkersets": lws / LWS_CRD}
def keda_crd(progress: Progress = print) -> Path:
    """KEDA's upstream ScaledObject CRD file."""
    return module_files(*KEDA, [SCALEDOBJECT_CRD], progress) / SCALEDOBJECT_CRD
