"""``make release`` (``kvplan-dev release``): build the operator image and the chart, push both to a local OCI
registry, install the chart from it by digest on the local control plane, check what was pushed, and run the image.

Steps (each prints a line; ``--json`` prints the one result object; everything started is stopped by PID):

1. **tools**: crane (github.com/google/go-containerregistry/cmd/crane) and the registry
   (github.com/distribution/distribution/v3/cmd/registry) built from their Go modules into ``~/.cache/kvplan``;
   mmdebstrap, podman and runc from Debian.
2. **layers**: :func:`kvplan_dev.image.build_layers` (Debian base by mmdebstrap, the locked wheels, the kvplan wheel).
3. **registry**: ``registry serve`` on 127.0.0.1, storage in ``out/release/registry``.
4. **image**: ``crane append`` the layers onto an empty OCI base (pushed as ``kvplan-operator-layers:<version>``),
   ``crane mutate`` the config (user, entrypoint, env, labels) into ``out/release/kvplan-operator-<version>.tar``,
   whose digest (``crane digest --tarball``) is the release's; ``crane push`` it as ``kvplan-operator:<version>``.
5. **verify**: the registry's digest for the tag must equal the local one (:func:`verify_digest`; a mismatch fails
   the release), and the pushed config must be :func:`check_config`-clean: user 10001, the exec-form entrypoint,
   the OCI labels (version, source, revision, licenses); the pushed filesystem (``crane export``) has no shell.
6. **chart**: ``helm package`` (version and appVersion = ``kvcore.__version__``) and ``helm push`` to
   ``oci://<registry>/charts``.
6b. **plugin**: :func:`kvplan_dev.release_plugin.push_plugin_wheel`: the ``kvplan-vllm`` wheel, pushed as the
   one-layer image ``kvplan-vllm-wheel:<version>`` (``/wheels/<wheel>``), read back and compared by sha256.
7. **install**: on a fresh local control plane, ``helm install oci://<registry>/charts/kvplan-operator`` with
   ``image.repository``/``image.tag``/``image.digest`` of the pushed image; the Deployment must name the image by
   that digest.
8. **run**: the demo (:mod:`kvplan_dev.demo`) with the operator started from the pushed image by podman, until the
   example KVPlan is Ready; if no container can run here, the exact error is reported (and fails the release
   unless ``--no-run``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import kvcore
from kvplan_dev import image
from kvplan_dev.gobuild import build_go_main
from kvplan_dev.tools import Tools, cache_root, ensure_apt_packages, ensure_tools, logs_dir

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "kvplan-operator"
OUT = REPO / "out" / "release"
CRANE = ("crane", "github.com/google/go-containerregistry/cmd/crane", "v0.22.1")
REGISTRY = ("registry", "github.com/distribution/distribution/v3/cmd/registry", "v3.1.2")
"""(binary, Go module path of the main package, version) built into ``~/.cache/kvplan/<binary>-<version>/``."""
IMAGE_REPO = "kvplan-operator"
CHART_REPO = "charts"
RELEASE_NAMESPACE = "kvplan-system"
Progress = Callable[[str], None]


class ReleaseError(RuntimeError):
    """A release step failed or a check did not hold; the message names which and why."""


@dataclass(frozen=True)
class ReleaseTools:
    """Every binary the release uses."""

    base: Tools
    crane: Path
    registry: Path


def ensure_release_tools(progress: Progress) -> ReleaseTools:
    """The control-plane tools plus crane and the registry (Go builds, cached) and Debian's mmdebstrap/podman/runc."""
    base = ensure_tools(progress)
    ensure_apt_packages({"mmdebstrap": "mmdebstrap", "podman": "podman", "runc": "runc"}, progress)
    built = {}
    for name, module, version in (CRANE, REGISTRY):
        built[name] = build_go_main(name, module, version, cache_root() / f"{name}-{version}" / name, logs_dir(),
                                    progress)
    return ReleaseTools(base, built["crane"], built["registry"])


def _run(argv: Sequence[str], step: str, timeout: float = 1800) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ReleaseError(f"{step}: `{' '.join(map(str, argv[:5]))} ...` exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def git_revision(repo: Path = REPO) -> tuple[str, int, bool]:
    """(commit, its committer time as SOURCE_DATE_EPOCH, whether the work tree has uncommitted changes)."""
    commit = _run(["git", "-C", str(repo), "rev-parse", "HEAD"], "git rev-parse").strip()
    epoch = int(_run(["git", "-C", str(repo), "log", "-1", "--format=%ct"], "git log").strip())
    dirty = bool(_run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], "git status").strip())
    return commit, epoch, dirty


def verify_digest(local: str, pushed: str, reference: str) -> None:
    """The release's digest (of the artifact built here) must be what the registry serves for the tag."""
    if not local.startswith("sha256:") or len(local) != 71:
        raise ReleaseError(f"local image digest {local!r} is not a sha256 digest")
    if pushed != local:
        raise ReleaseError(f"digest mismatch: built {local} but the registry serves {pushed} for {reference}; "
                           "the release is not what was pushed")


def check_config(config: dict[str, Any], revision: str) -> list[str]:
    """Every way the pushed image config differs from the release's promises; empty when it keeps them all."""
    problems = []
    cfg = config.get("config") or {}
    if cfg.get("User") != image.USER:
        problems.append(f"User is {cfg.get('User')!r}, not {image.USER!r}")
    if cfg.get("Entrypoint") != list(image.ENTRYPOINT):
        problems.append(f"Entrypoint is {cfg.get('Entrypoint')!r}, not {list(image.ENTRYPOINT)!r}")
    if cfg.get("Cmd"):
        problems.append(f"Cmd is {cfg.get('Cmd')!r}; the entrypoint alone starts the operator")
    if cfg.get("Shell"):
        problems.append(f"Shell is set ({cfg.get('Shell')!r}); nothing may need a shell")
    labels = cfg.get("Labels") or {}
    for key, value in image.oci_labels(revision).items():
        if labels.get(key) != value:
            problems.append(f"label {key} is {labels.get(key)!r}, not {value!r}")
    env = dict(item.split("=", 1) for item in cfg.get("Env") or [])
    for key, value in image.ENV.items():
        if env.get(key) != value:
            problems.append(f"env {key} is {env.get(key)!r}, not {value!r}")
    if config.get("os") != "linux" or config.get("architecture") != "amd64":
        problems.append(f"platform is {config.get('os')}/{config.get('architecture')}, not linux/amd64")
    return problems


def shells_in(export: Path) -> list[str]:
    """Shell binaries present in a flattened filesystem tar (``crane export``)."""
    found = []
    with tarfile.open(export) as tar:
        for member in tar:
            name = member.name.removeprefix("./").removeprefix("/")
            if name in image.SHELLS:
                found.append(name)
    return found


def _crane(tools: ReleaseTools, *args: str, step: str) -> str:
    return _run([str(tools.crane), *args], f"crane {step}").strip()


def build_and_push_image(tools: ReleaseTools, host: str, layers: list[Path], revision: str,
                         report: dict[str, Any], progress: Progress, out: Path = OUT) -> str:
    """Steps 4-5; returns ``<host>/kvplan-operator:<version>@sha256:...``."""
    version = kvcore.__version__
    staging = f"{host}/{IMAGE_REPO}-layers:{version}"
    tag = f"{host}/{IMAGE_REPO}:{version}"
    tarball = out / f"{IMAGE_REPO}-{version}.tar"
    progress(f"[release] crane append {len(layers)} layers -> {staging} ...")
    append = ["append", "--oci-empty-base", "--platform", "linux/amd64", "-t", staging]
    for layer in layers:
        append += ["-f", str(layer)]
    _crane(tools, *append, step="append")
    progress(f"[release] crane mutate (user {image.USER}, entrypoint, labels) -> {tarball.name} ...")
    tarball.unlink(missing_ok=True)
    _crane(tools, "mutate", staging, *image.config_flags(revision), "-t", tag, "-o", str(tarball), step="mutate")
    local = _crane(tools, "digest", "--tarball", str(tarball), step="digest --tarball")
    progress(f"[release] crane push {tarball.name} -> {tag} (built digest {local}) ...")
    _crane(tools, "push", str(tarball), tag, step="push")
    pushed = _crane(tools, "digest", tag, step="digest")
    verify_digest(local, pushed, tag)
    manifest = json.loads(_crane(tools, "manifest", f"{tag}@{pushed}", step="manifest"))
    config = json.loads(_crane(tools, "config", f"{tag}@{pushed}", step="config"))
    problems = check_config(config, revision)
    export = out / "image-filesystem.tar"
    _crane(tools, "export", f"{tag}@{pushed}", str(export), step="export")
    problems += [f"the pushed filesystem contains the shell {name}" for name in shells_in(export)]
    export.unlink()
    if problems:
        raise ReleaseError("the pushed image config breaks its promises: " + "; ".join(problems))
    sizes = [int(layer["size"]) for layer in manifest["layers"]]
    report["image"] = {
        "reference": f"{tag}@{pushed}", "digest": pushed, "tarball": str(tarball),
        "tarball_bytes": tarball.stat().st_size, "compressed_bytes": sum(sizes) + int(manifest["config"]["size"]),
        "layers": [{"file": p.name, "bytes": s} for p, s in zip(layers, sizes)],
        "media_type": manifest.get("mediaType"), "user": config["config"]["User"],
        "entrypoint": config["config"]["Entrypoint"], "labels": config["config"].get("Labels"),
    }
    return f"{tag}@{pushed}"


def push_chart(tools: ReleaseTools, host: str, report: dict[str, Any], progress: Progress, out: Path = OUT) -> str:
    """Step 6; returns the chart's ``oci://`` reference (without version)."""
    version = kvcore.__version__
    progress(f"[release] helm package + helm push oci://{host}/{CHART_REPO} ...")
    packaged = out / f"kvplan-operator-{version}.tgz"
    packaged.unlink(missing_ok=True)
    _run([str(tools.base.helm), "package", str(CHART), "--version", version, "--app-version", version,
          "--destination", str(out)], "helm package")
    pushed = subprocess.run([str(tools.base.helm), "push", str(packaged), f"oci://{host}/{CHART_REPO}",
                             "--plain-http"], capture_output=True, text=True, timeout=300, check=False)
    if pushed.returncode != 0:
        raise ReleaseError(f"helm push: exited {pushed.returncode}: {pushed.stderr.strip()}")
    text = pushed.stdout + pushed.stderr
    digest = next((line.split()[-1] for line in text.splitlines() if line.startswith("Digest:")), "")
    report["chart"] = {"reference": f"oci://{host}/{CHART_REPO}/kvplan-operator", "version": version,
                       "digest": digest, "package": str(packaged), "package_bytes": packaged.stat().st_size}
    return f"oci://{host}/{CHART_REPO}/kvplan-operator"


def install_from_registry(tools: ReleaseTools, chart_ref: str, image_ref: str, report: dict[str, Any],
                          progress: Progress) -> None:
    """Step 7: ``helm install oci://...`` on a fresh local control plane, by digest; check the Deployment."""
    from kvplan_dev.cluster import LocalCluster

    repository_tag, digest = image_ref.split("@", 1)
    repository, tag = repository_tag.rsplit(":", 1)
    with tempfile.TemporaryDirectory(prefix="kvplan-release-") as tmp, \
            LocalCluster(tools.base, workdir=Path(tmp) / "cluster") as cluster:
        progress(f"[release] helm install {chart_ref} --version {kvcore.__version__} (image by digest) ...")
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        done = subprocess.run(
            [str(tools.base.helm), "install", "kvplan", chart_ref, "--version", kvcore.__version__, "--plain-http",
             "--namespace", RELEASE_NAMESPACE, "--create-namespace", "--set", f"image.repository={repository}",
             "--set", f"image.tag={tag}", "--set", f"image.digest={digest}"],
            capture_output=True, text=True, timeout=300, env=env, check=False)
        if done.returncode != 0:
            raise ReleaseError(f"helm install {chart_ref}: exited {done.returncode}: {done.stderr.strip()}")
        dep = json.loads(cluster.kubectl("-n", RELEASE_NAMESPACE, "get", "deployment", "-l",
                                         "app.kubernetes.io/instance=kvplan", "-o", "json").stdout)["items"]
        images = [c["image"] for d in dep for c in d["spec"]["template"]["spec"]["containers"]]
        if images != [image_ref]:
            raise ReleaseError(f"the installed Deployment runs {images}, not the pushed {image_ref}")
        crds = cluster.kubectl("get", "crd", "kvplans.kvplan.io", "-o", "jsonpath={.spec.versions[*].name}").stdout
        report["install"] = {"chart": chart_ref, "deployment_images": images, "kvplan_crd_versions": crds.split(),
                             "apiserver": cluster.apiserver_version}


def run_image(image_ref: str, report: dict[str, Any], progress: Progress, out_dir: Path = OUT) -> bool:
    """Step 8: the demo with the operator in a container of the pushed image; True when the KVPlan became Ready."""
    from kvplan_dev import demo

    progress(f"[release] podman: the demo with the operator from {image_ref} ...")
    out = out_dir / "run-demo.json"
    done = subprocess.run([sys.executable, "-m", "kvplan_dev.demo", "--json", "--operator-image", image_ref],
                          capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "PYTHONSAFEPATH": "1"})
    out.write_text(done.stdout)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        result = {"ok": False, "error": f"demo printed no JSON (exit {done.returncode}): {done.stderr[-2000:]}"}
    kvplan = result.get("kvplan") or {}
    report["run"] = {"ok": bool(result.get("ok")), "ready": kvplan.get("ready"), "reason": kvplan.get("reason"),
                     "seconds_to_ready": kvplan.get("seconds_to_ready"), "error": result.get("error"),
                     "operator_log_tail": result.get("operator_log_tail"), "report": str(out),
                     "deployments_changed": sorted(result.get("deployments") or {}), "namespace": demo.NAMESPACE}
    return bool(result.get("ok"))


def release(*, run: bool = True, progress: Progress = print, out: Path = OUT) -> dict[str, Any]:
    """Everything above, writing into ``out`` (default ``out/release``; the registry's storage is
    ``out/registry``); raises :class:`ReleaseError` on the first failed step or check."""
    from kvplan_dev.registry import LocalRegistry
    from kvplan_dev.release_plugin import push_plugin_wheel

    started = time.monotonic()
    revision, epoch, dirty = git_revision()
    report: dict[str, Any] = {"version": kvcore.__version__, "revision": revision, "dirty": dirty,
                              "source_date_epoch": epoch, "machine": f"{platform.node()} {os.cpu_count()} cpus",
                              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    tools = ensure_release_tools(progress)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    layers = image.build_layers(REPO, out, epoch, progress)
    report["layers_seconds"] = round(time.monotonic() - t0, 1)
    with LocalRegistry(tools.registry, out / "registry", out / "registry-run") as registry:
        report["registry"] = registry.host
        t0 = time.monotonic()
        image_ref = build_and_push_image(tools, registry.host, layers, revision + ("-dirty" if dirty else ""),
                                         report, progress, out)
        report["image_seconds"] = round(time.monotonic() - t0, 1)
        chart_ref = push_chart(tools, registry.host, report, progress, out)
        push_plugin_wheel(lambda *args, step: _crane(tools, *args, step=step), registry.host, REPO, epoch, report,
                          progress, out)
        install_from_registry(tools, chart_ref, image_ref, report, progress)
        if run:
            if not run_image(image_ref, report, progress, out):
                raise ReleaseError(f"the image did not reconcile the example: {report['run']}")
    report["seconds"] = round(time.monotonic() - started, 1)
    report["ok"] = True
    (out / "release.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``kvplan-dev release [--json] [--no-run]``."""
    parser = argparse.ArgumentParser(prog="kvplan-dev release", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the one result object on stdout")
    parser.add_argument("--no-run", action="store_true", help="skip step 8 (running the image with podman)")
    parser.add_argument("--out", type=Path, default=OUT, help="where artifacts go (default %(default)s)")
    args = parser.parse_args(argv)
    log: Progress = (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        report = release(run=not args.no_run, progress=log, out=args.out)
    except (ReleaseError, RuntimeError) as exc:  # PluginWheelError and the plugin step's checks included
        report = {"ok": False, "error": str(exc)}
        log(f"kvplan-dev release: error: {exc}")
    if args.json:
        print(json.dumps(report, indent=2))
    elif report.get("ok"):
        img = report["image"]
        print(f"released {report['version']} ({report['revision'][:12]}{'-dirty' if report['dirty'] else ''}) "
              f"in {report['seconds']} s\n  image  {img['reference']}\n         "
              f"{img['compressed_bytes'] / 1e6:.1f} MB compressed in {len(img['layers'])} layers, user "
              f"{img['user']}, entrypoint {img['entrypoint']}\n  chart  {report['chart']['reference']}:"
              f"{report['chart']['version']} ({report['chart']['digest']})\n  plugin {report['plugin']['reference']}\n"
              f"  install {report['install']}\n"
              f"  run    {report.get('run', 'skipped')}")
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
