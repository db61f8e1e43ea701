"""Test-side checks of the operator's honesty, written independently of the operator's code (flags are parsed here,
not with the operator's parser): do the objects on the cluster agree with each other and with status?

Disagreements looked for:

1. a Deployment whose ``kvplan.io/layout`` annotation names another TP/PP than its container's flags;
2. the router document (``kvplan.v1``) claiming, for a group it does not mark ``draining``, a TP/PP that the group's
   Deployment does not have;
3. status claiming a plan applied (condition Applied=True) whose layouts are not the Deployments', whose id is not
   the router document's or the plan detail's, or whose class weights (published in the plan's detail
   ConfigMaps) are not the document's or the HTTPRoute's (unless status notes say the HTTPRoute was not found when
   the plan was applied);
4. (given the state ConfigMap) a half-applied plugin (kvplan's ``--scheduler-cls`` without the reservation file
   mounted, or the reverse, unless the file mounted reserves nothing: the stat logger's classification file); a
   Deployment projecting a reservation file the state ConfigMap lacks (its new pods
   could not start), or projecting another group's file, or whose ``KVPLAN_RESERVATIONS_FILE`` names another file
   than it projects; status claiming applied engine knobs a Deployment does not run; status claiming a plan
   applied whose group's reservation file (``reservations-<group>.json``) names another plan, or other
   reservations than the plan's detail (``gates.<g>``), or lists another number of classes than
   ``status.plan.groups.<g>.gate``.

:func:`detail_document` joins the plan's detail ConfigMaps here, from their documented layout, not with the
operator's reader.

Shared by the fault-injection unit tests (over the fake's objects) and the integration tests (over the apiserver's).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any


def detail_document(get_configmap: Callable[[str], Mapping[str, Any] | None], kvplan: str = "fleet"
                    ) -> dict[str, Any] | None:
    """The plan's detail document (``kvplan.plan.v1``) joined from ``<kvplan>-plan``, ``<kvplan>-plan-1``, ...:
    chunk 0's ``kvplan.io/plan-chunk`` says ``0/n``, every chunk ``i/n`` and the same ``kvplan.io/plan-digest``,
    the sha256 of the joined ``data["plan.json"]``. None when chunk 0 does not exist; AssertionError when the
    chunks do not fit together."""
    first = get_configmap(f"{kvplan}-plan")
    if first is None:
        return None
    ann = first["metadata"]["annotations"]
    index, _, total = ann["kvplan.io/plan-chunk"].partition("/")
    assert index == "0", ann
    texts = []
    for i in range(int(total)):
        body = first if i == 0 else get_configmap(f"{kvplan}-plan-{i}")
        assert body is not None, f"chunk {i} of {total} missing"
        a = body["metadata"]["annotations"]
        assert a["kvplan.io/plan-chunk"] == f"{i}/{total}" and a["kvplan.io/plan-digest"] == ann["kvplan.io/plan-digest"]
        texts.append(body["data"]["plan.json"])
    text = "".join(texts)
    assert hashlib.sha256(text.encode()).hexdigest() == ann["kvplan.io/plan-digest"]
    doc = json.loads(text)
    assert doc["format"] == "kvplan.plan.v1" and doc["plan"] == ann["kvplan.io/plan"]
    return dict(doc)


def published_classes(get_configmap: Callable[[str], Mapping[str, Any] | None], kvplan: str = "fleet"
                      ) -> dict[str, Any]:
    """Per class as the last recorded plan published it (the detail document's ``classes``; {} without one)."""
    doc = detail_document(get_configmap, kvplan)
    return dict(doc["classes"]) if doc else {}


def container_flags(dep: Mapping[str, Any], name: str = "vllm") -> tuple[int, int]:
    """(tp, pp) the vLLM container passes (args, command, or a ``sh -c`` string); default 1."""
    c = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == name)
    words = list(c.get("command") or []) + list(c.get("args") or [])
    text = " ".join(words).replace("=", " ")
    toks = text.split()

    def value(flag: str) -> int:
        found = 1
        for i, t in enumerate(toks):
            if t == flag and i + 1 < len(toks):
                found = int(toks[i + 1].strip("'\""))
        return found

    return value("--tensor-parallel-size"), value("--pipeline-parallel-size")


def annotated_layout(dep: Mapping[str, Any]) -> tuple[int, int] | None:
    text = (dep.get("metadata", {}).get("annotations") or {}).get("kvplan.io/layout")
    if not text:
        return None
    parts = dict(p.split("=", 1) for p in text.split(","))
    return int(parts["tp"]), int(parts["pp"])


def largest_remainder(shares: Mapping[str, float], total: int = 1000) -> dict[str, int]:
    s = sum(max(v, 0.0) for v in shares.values())
    if s <= 0:
        return {k: 0 for k in shares}
    exact = {k: max(v, 0.0) * total / s for k, v in shares.items()}
    out = {k: math.floor(exact[k]) for k in shares}
    for k in sorted(shares, key=lambda k: (out[k] - exact[k], k))[:total - sum(out.values())]:
        out[k] += 1
    return out


def _argv(dep: Mapping[str, Any], name: str = "vllm") -> list[str]:
    c = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == name)
    return " ".join(list(c.get("command") or []) + list(c.get("args") or [])).replace("=", " ").split()


def _flag(argv: list[str], flag: str, default: str | None) -> str | None:
    found = default
    for i, t in enumerate(argv):
        if t == flag and i + 1 < len(argv):
            found = argv[i + 1].strip("'\"")
    return found


def _classification_only(dep: Mapping[str, Any], state: Mapping[str, Any] | None) -> bool:
    """Whether every reservation file ``dep``'s pod projects is in the state ConfigMap and reserves nothing (the
    file a pod mounts without kvplan's scheduler, for the stat logger's class labels)."""
    keys = [i.get("key") for v in dep["spec"]["template"]["spec"].get("volumes") or []
            if v.get("name") == "kvplan-reservations" for i in (v.get("configMap") or {}).get("items") or []]
    docs = [((state or {}).get("data") or {}).get(k) for k in keys]
    if not keys or any(d is None for d in docs):
        return False
    return all(int(c.get("reserveTokens", 0)) == 0 for d in docs for c in (json.loads(d).get("classes") or {}).values())


def knob_disagreements(*, deployments: Mapping[str, Mapping[str, Any] | None], groups: Mapping[str, str],
                       status: Mapping[str, Any], state: Mapping[str, Any] | None,
                       detail: Mapping[str, Any] | None = None) -> list[str]:
    """Item 4 of the module docstring (vLLM's defaults for absent flags: 256 sequences, watermark 0, fcfs)."""
    out: list[str] = []
    for g, name in groups.items():
        dep = deployments.get(name)
        if dep is None:
            continue
        sched = _flag(_argv(dep), "--scheduler-cls", None)
        c = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
        mounted = any(m.get("mountPath") == "/etc/kvplan" for m in c.get("volumeMounts") or []) and any(
            v.get("name") == "kvplan-reservations" for v in dep["spec"]["template"]["spec"].get("volumes") or [])
        ours = (sched or "").startswith("kvplan_vllm.")
        if mounted and not ours and _classification_only(dep, state):
            continue  # mounted for the stat logger's class labels: no scheduler reads it, so it reserves nothing
        if ours != mounted:
            out.append(f"Deployment {name}: plugin half-applied (--scheduler-cls {sched}, reservation file "
                       f"{'mounted' if mounted else 'not mounted'})")
    applied = next((c for c in status.get("conditions") or [] if c.get("type") == "Applied"), None)
    plan = status.get("plan") or {}
    if applied is None or applied.get("status") != "True" or not plan:
        return out
    for g, entry in (plan.get("groups") or {}).items():
        dep, eng = deployments.get(groups.get(g, "")), entry.get("engine") or {}
        if dep is None or not eng:
            continue
        argv = _argv(dep)
        runs = {"maxNumSeqs": int(_flag(argv, "--max-num-seqs", "256") or 0),
                "watermark": float(_flag(argv, "--watermark", "0") or 0),
                "schedulingPolicy": _flag(argv, "--scheduling-policy", "fcfs"),
                "schedulerCls": _flag(argv, "--scheduler-cls", None)}
        if not str(runs["schedulerCls"]).startswith("kvplan_vllm."):
            runs["schedulerCls"] = None  # a user's own scheduler is not kvplan's claim
        for key, value in runs.items():
            if (eng.get(key) is not None or key == "schedulerCls") and eng.get(key) != value:
                out.append(f"status claims group {g} runs {key}={eng.get(key)}, Deployment runs {value}")
    for g, entry in (plan.get("groups") or {}).items():
        gate = entry.get("gate")
        doc = ((state or {}).get("data") or {}).get(f"reservations-{g}.json")
        if state is None or gate is None:
            continue
        if doc is None:
            out.append(f"status shows group {g}'s reservation file, the state ConfigMap has none")
            continue
        res = json.loads(doc)
        if res.get("plan") != plan.get("id"):
            out.append(f"status claims plan {plan.get('id')} applied, group {g}'s reservation file has "
                       f"{res.get('plan')}")
        if detail is None:
            continue
        listed = ((detail.get("gates") or {}).get(g) or {}).get("classes")
        if listed is None:
            out.append(f"status shows group {g}'s reservation file, the plan detail has no gates.{g}")
            continue
        if len(listed) != gate.get("classes"):
            out.append(f"status counts {gate.get('classes')} classes in group {g}'s file, the plan detail {len(listed)}")
        for c, want in listed.items():
            have = (res.get("classes") or {}).get(c, {}).get("reserveTokens")
            if have != want.get("reserveTokens"):
                out.append(f"the plan detail gates {c} on group {g} with {want.get('reserveTokens')} tokens, its "
                           f"reservation file with {have}")
    return out


def file_disagreements(*, deployments: Mapping[str, Mapping[str, Any] | None], groups: Mapping[str, str],
                       state: Mapping[str, Any] | None) -> list[str]:
    """Item 4's reservation files: what each Deployment projects exists, is its group's, and is what its env names
    (the fields are read here, independently of the operator's plugin_mount)."""
    out = []
    data = (state or {}).get("data") or {}
    for g, name in groups.items():
        dep = deployments.get(name)
        if dep is None:
            continue
        pod = dep["spec"]["template"]["spec"]
        keys = [i.get("key") for v in pod.get("volumes") or [] if v.get("name") == "kvplan-reservations"
                for i in (v.get("configMap") or {}).get("items") or []]
        if not keys:
            continue
        c = next(c for c in pod["containers"] if c["name"] == "vllm")
        env = next((e.get("value") for e in c.get("env") or [] if e.get("name") == "KVPLAN_RESERVATIONS_FILE"), None)
        for key in keys:
            if key not in data:
                out.append(f"Deployment {name} projects {key}, which the state ConfigMap lacks")
        if keys != [f"reservations-{g}.json"]:
            out.append(f"Deployment {name} of group {g} projects {keys}, not its own reservations-{g}.json")
        if env is not None and env != f"/etc/kvplan/{keys[0]}":
            out.append(f"Deployment {name}: KVPLAN_RESERVATIONS_FILE={env}, the volume projects {keys}")
    return out


def disagreements(*, deployments: Mapping[str, Mapping[str, Any] | None], groups: Mapping[str, str],
                  router: Mapping[str, Any] | None, route: Mapping[str, Any] | None,
                  status: Mapping[str, Any], class_header: str = "x-gateway-inference-objective",
                  services: Mapping[str, str] | None = None, state: Mapping[str, Any] | None = None,
                  detail: Mapping[str, Any] | None = None) -> list[str]:
    """Every disagreement (see the module docstring). ``groups``: group -> Deployment name; ``router``: the parsed
    router document or None; ``route``: the HTTPRoute or None; ``services``: group -> Service name; ``state``:
    the KVPlan's state ConfigMap (checks 4 run only when it is given); ``detail``: the plan's detail document
    (:func:`detail_document`) or None."""
    out: list[str] = (knob_disagreements(deployments=deployments, groups=groups, status=status, state=state,
                                         detail=detail)
                      + file_disagreements(deployments=deployments, groups=groups, state=state)) \
        if state is not None else []
    layouts: dict[str, tuple[int, int]] = {}
    for g, name in groups.items():
        dep = deployments.get(name)
        if dep is None:
            continue
        layouts[g] = container_flags(dep)
        ann = annotated_layout(dep)
        if ann is not None and ann != layouts[g]:
            out.append(f"Deployment {name}: annotation says {ann}, flags say {layouts[g]}")
    if router is not None:
        for g, entry in (router.get("groups") or {}).items():
            if entry.get("draining") or g not in layouts:
                continue
            if (entry.get("tp"), entry.get("pp")) != layouts[g]:
                out.append(f"router document: group {g} at tp={entry.get('tp')} pp={entry.get('pp')}, "
                           f"Deployment at {layouts[g]}")
    applied = next((c for c in status.get("conditions") or [] if c.get("type") == "Applied"), None)
    plan = status.get("plan") or {}
    classes: Mapping[str, Any] = (detail or {}).get("classes") or {}
    if applied is not None and applied.get("status") == "True" and plan:
        if detail is None or detail.get("plan") != plan.get("id"):
            out.append(f"status claims plan {plan.get('id')} applied, its detail ConfigMaps hold "
                       f"{(detail or {}).get('plan')}")
        for g, entry in (plan.get("groups") or {}).items():
            if g in layouts and entry.get("tp", 0) > 0 and (entry["tp"], entry["pp"]) != layouts[g]:
                out.append(f"status claims group {g} at tp={entry['tp']} pp={entry['pp']} applied, "
                           f"Deployment at {layouts[g]}")
        if router is not None:
            if router.get("plan") != plan.get("id"):
                out.append(f"status claims plan {plan.get('id')} applied, router document has {router.get('plan')}")
            for c, entry in classes.items():
                doc = ((router.get("classes") or {}).get(c) or {}).get("weights") or {}
                mine = entry.get("routing") or {}
                if any(abs(float(doc.get(g, 0)) - float(mine.get(g) or 0)) > 1e-6 for g in set(doc) | set(mine)):
                    out.append(f"status routing of {c} {entry.get('routing')} != router document {doc}")
        notes = " ".join(plan.get("notes") or [])
        if route is not None and services is not None and "HTTPRoute" not in notes:  # status says it was absent
            by_service = {s: g for g, s in services.items()}
            for i, rule in enumerate(route.get("spec", {}).get("rules") or []):
                cls = None
                for m in rule.get("matches") or []:
                    for h in m.get("headers") or []:
                        if str(h.get("name", "")).lower() == class_header:
                            cls = h.get("value")
                if cls not in classes:
                    continue
                refs = [b for b in rule.get("backendRefs") or [] if b.get("name") in by_service
                        and (b.get("kind") or "Service") == "Service"]
                want = largest_remainder({b["name"]: float(classes[cls]["routing"].get(by_service[b["name"]])
                                                           or 0) for b in refs})
                have = {b["name"]: b.get("weight") for b in refs}
                if have != want:
                    out.append(f"HTTPRoute rule {i} ({cls}): weights {have}, status plan says {want}")
    return out


def router_document(configmap: Mapping[str, Any] | None, key: str = "routing.json") -> dict[str, Any] | None:
    if configmap is None or key not in (configmap.get("data") or {}):
        return None
    return dict(json.loads(configmap["data"][key]))
