"""The plan's detail: what ``status`` cannot hold at fleet size, in ConfigMaps the KVPlan owns.

At 256 classes x 64 groups the whole plan as JSON is about a megabyte, mostly per-class routing and prefix maps; in
``status`` it would approach etcd's 1.5 MiB request limit and make ``kubectl get -o yaml`` unreadable. So status
keeps what ``kubectl get`` and ``describe`` need (conditions, summary, objective terms, per-group layout, class
counts, the plan id, the largest changes; :mod:`kvplan_operator.record.status`) and a reference to one JSON document,
format ``kvplan.plan.v1``, holding the rest:

- ``classes.<c>``: reservation, admission, radius, published routing and prefix-cache fractions (**sparse**: only
  groups with a non-zero value; a group not listed is 0), samples, windows, arrival rate, source;
- ``gates.<g>``: per group running kvplan's vLLM plugin, per class listed in its reservation file the plan's y,
  the file's reservation and where it comes from, and the reservation rule's reason (:mod:`kvplan_operator.decide.gate`);
- ``notes``: every note (status keeps the first few);
- ``diff``: every change against the previous plan (status keeps the largest of each kind);
- ``lastGoodPlan``: the kvcore ``Plan`` applied in full, with sparse routing and prefix maps and without its diff:
  the ``previous`` the next re-plan warm-starts from and diffs against.

The document's compact text (ASCII) is cut into chunks of at most :data:`CHUNK_BYTES`, stored under
``data["plan.json"]`` of ConfigMaps ``<kvplan>-plan`` (chunk 0), ``<kvplan>-plan-1``, ... in order, each with an
ownerReference to the KVPlan and the annotations ``kvplan.io/plan`` (plan id), ``kvplan.io/plan-chunk``
(``i/n``) and ``kvplan.io/plan-digest`` (sha256 of the whole text). A reader takes ``n`` from chunk 0, joins the
chunks and accepts the document only when every chunk carries the same digest and the joined text hashes to it.
When the document shrinks, chunks past the new ``n`` are emptied (the operator may not delete ConfigMaps; the
ownerReference removes them with the KVPlan). Nothing here reads the cluster except :func:`read_detail`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcore import Plan

from ..desired import ANN_OWNER, ANN_PLAN, Stage, Write
from ..kube import KubeApi

FORMAT = "kvplan.plan.v1"
#: The data key of every chunk.
KEY = "plan.json"
#: Largest chunk, bytes: half the 1 MiB a ConfigMap may hold, so every object stays far below both that limit and
#: etcd's 1.5 MiB request limit, and a watch event carrying one stays small.
CHUNK_BYTES = 512 * 1024
ANN_CHUNK = "kvplan.io/plan-chunk"
ANN_DIGEST = "kvplan.io/plan-digest"
LABEL = "kvplan.io/plan-detail"
#: The writer's name in ``Write.target`` (the record phase sends these writes, not apply).
TARGET = "plan-detail"


def chunk_name(kvplan: str, index: int) -> str:
    """``<kvplan>-plan`` for chunk 0, ``<kvplan>-plan-<i>`` after it."""
    return f"{kvplan}-plan" if index == 0 else f"{kvplan}-plan-{index}"


def is_chunk(kvplan: str, name: str) -> bool:
    """Whether ``name`` is (or could be) one of ``kvplan``'s chunk ConfigMaps."""
    rest = name.removeprefix(f"{kvplan}-plan")
    return rest != name and (rest == "" or (rest.startswith("-") and rest[1:].isdigit()))


def sparse(values: Mapping[str, float]) -> dict[str, float]:
    """Only the non-zero entries (a group not listed is 0)."""
    return {k: v for k, v in values.items() if v}


def plan_json(plan: Plan) -> dict[str, Any]:
    """The kvcore plan as stored: sparse routing and prefix maps, no diff (the document has its own)."""
    body: dict[str, Any] = plan.model_dump(mode="json", exclude={"diff"})
    for c in body.get("classes") or []:
        c["routing"] = sparse(c.get("routing") or {})
        c["prefix_fraction"] = sparse(c.get("prefix_fraction") or {})
    return body


def encode(doc: Mapping[str, Any]) -> str:
    """The document's text: compact, sorted keys, ASCII (so characters are bytes and chunks cut anywhere)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def split(text: str, limit: int | None = None) -> list[str]:
    """``text`` in consecutive pieces of at most ``limit`` (default :data:`CHUNK_BYTES`) characters (bytes, the
    text being ASCII); at least one."""
    size = limit or CHUNK_BYTES
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


@dataclass(frozen=True)
class Detail:
    """The detail as observed: the document (None: absent or unreadable, and ``problem`` says why, empty when it
    simply does not exist yet), and the chunk ConfigMaps read (name -> body, None: missing)."""

    doc: Mapping[str, Any] | None
    chunks: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    problem: str = ""

    def previous_plan(self) -> Plan | None:
        """The stored kvcore plan (the last plan applied in full), or None."""
        raw = (self.doc or {}).get("lastGoodPlan")
        if not isinstance(raw, Mapping):
            return None
        try:
            return Plan.model_validate(raw)
        except ValueError:
            return None

    def published(self) -> Mapping[str, Mapping[str, Any]]:
        """Per class as published: ``admitted``, ``routing`` and ``prefixCacheFraction`` (sparse)."""
        classes = (self.doc or {}).get("classes")
        return classes if isinstance(classes, Mapping) else {}


def _chunk_count(body: Mapping[str, Any] | None) -> int | None:
    ann = ((body or {}).get("metadata") or {}).get("annotations") or {}
    _, _, total = str(ann.get(ANN_CHUNK, "")).partition("/")
    return int(total) if total.isdigit() and 0 < int(total) <= MAX_CHUNKS else None


#: Most chunks read: 64 x 512 KiB = 32 MiB, far above any document the CRD's sizes give (about 2 MB with dense
#: routing at 256 classes x 64 groups); a larger count is a corrupt annotation.
MAX_CHUNKS = 64


def decode(kvplan: str, chunks: Mapping[str, Mapping[str, Any] | None]) -> Detail:
    """The document from chunk bodies already read (see the module docstring)."""
    first = chunks.get(chunk_name(kvplan, 0))
    if first is None:
        return Detail(None, chunks)
    n = _chunk_count(first)
    if n is None:
        return Detail(None, chunks, f"ConfigMap {chunk_name(kvplan, 0)}: no readable {ANN_CHUNK} annotation")
    parts: list[str] = []
    want = ((first.get("metadata") or {}).get("annotations") or {}).get(ANN_DIGEST)
    for i in range(n):
        name = chunk_name(kvplan, i)
        body = chunks.get(name)
        ann = ((body or {}).get("metadata") or {}).get("annotations") or {}
        if body is None or ann.get(ANN_DIGEST) != want or ann.get(ANN_CHUNK) != f"{i}/{n}":
            return Detail(None, chunks, f"ConfigMap {name}: missing or from another plan (a write was interrupted)")
        parts.append(str((body.get("data") or {}).get(KEY) or ""))
    text = "".join(parts)
    if not text.isascii() or digest(text) != want:
        return Detail(None, chunks, f"ConfigMap {chunk_name(kvplan, 0)}: the joined chunks do not match their digest")
    try:
        doc = json.loads(text)
    except ValueError:
        return Detail(None, chunks, f"ConfigMap {chunk_name(kvplan, 0)}: not JSON")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return Detail(None, chunks, f"ConfigMap {chunk_name(kvplan, 0)}: not a {FORMAT} document")
    return Detail(doc, chunks)


def read_detail(kube: KubeApi, namespace: str, kvplan: str) -> Detail:
    """Read chunk 0, then the others it names (one GET each). Raises :class:`~kvplan_operator.kube.KubeError`."""
    chunks: dict[str, Mapping[str, Any] | None] = {chunk_name(kvplan, 0): kube.get_configmap(
        namespace, chunk_name(kvplan, 0))}
    n = _chunk_count(chunks[chunk_name(kvplan, 0)]) or 1
    for i in range(1, n):
        chunks[chunk_name(kvplan, i)] = kube.get_configmap(namespace, chunk_name(kvplan, i))
    return decode(kvplan, chunks)


def detail_writes(*, kvplan: str, namespace: str, owner: str, owner_ref: Mapping[str, Any], plan_id: str,
                  doc: Mapping[str, Any], observed: Detail, limit: int | None = None) -> list[Write]:
    """The writes that store ``doc`` (only chunks whose content differs; chunks past the new count emptied)."""
    text = encode(doc)
    pieces = split(text, limit)
    sha = digest(text)
    n = len(pieces)
    writes: list[Write] = []
    names = [chunk_name(kvplan, i) for i in range(n)]
    stale = [name for name, body in observed.chunks.items() if name not in names and body is not None
             and ((body.get("data") or {}).get(KEY) or _chunk_count(body) is not None)]
    for i, name in [*enumerate(names), *((-1, s) for s in stale)]:
        piece = pieces[i] if i >= 0 else None
        ann = {ANN_OWNER: owner, ANN_PLAN: plan_id, ANN_DIGEST: sha if i >= 0 else "",
               ANN_CHUNK: f"{i}/{n}" if i >= 0 else "unused"}
        current = observed.chunks.get(name)
        have_ann = ((current or {}).get("metadata") or {}).get("annotations") or {}
        have = ((current or {}).get("data") or {}).get(KEY)
        if current is not None and have == piece and all(have_ann.get(k) == v for k, v in ann.items()):
            continue
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace, "ownerReferences": [dict(owner_ref)],
                                 "labels": {"app.kubernetes.io/managed-by": "kvplan-operator", LABEL: kvplan},
                                 "annotations": ann},
                    "data": {KEY: piece or ""}}
            writes.append(Write(Stage.RECORD, TARGET, "ConfigMap", name, "create", body))
        else:
            patch = {"metadata": {"annotations": ann}, "data": {KEY: piece}}
            writes.append(Write(Stage.RECORD, TARGET, "ConfigMap", name, "patch", patch, ("emptied",) if
                                piece is None else ()))
    return writes
