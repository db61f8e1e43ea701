"""Phase 5 of the classification file's bootstrap: status while the history it labels is awaited.

There is no plan, so the reconcile stays the observe failure (Ready False, or Degraded with the last good plan in
force, reason ``TooFewSamples`` / ``MetricAbsent``), its message saying where the file is mounted and what is
awaited; ``status.lastError.classificationFile`` says the same as data (``deployments`` mounting it, ``mountedAt``
when this operator mounted them, ``awaiting``, and ``held`` / ``kept`` groups). Applied says what the bootstrap
wrote: ``ClassificationFileMounted`` (True), else ``KnobsHeld`` (the disruption budget held the mount; EngineKnobs
too), the build's refusal, or ``ApplyFailed``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import conditions as C
from ..apply import Applied
from ..decide.bootstrap import Bootstrap
from ..observe import HistoryAwaited
from ..run import Failure
from . import Outcome, Recorder
from .status import iso


def record_bootstrap(rec: Recorder, awaited: HistoryAwaited, boot: Bootstrap, refused: Failure | None,
                     applied: Applied | None) -> Outcome:
    """Record one bootstrap (module docstring): ``refused`` by build, else ``applied``."""
    assert awaited.observation is not None
    run, spec = rec.run, awaited.observation.spec
    deployment = {g.name: g.deployment for g in spec.groups}
    ok = refused is None and applied is not None and applied.ok
    mounted = sorted(boot.mounted + (boot.mount if ok else ()))
    old = ((run.old_status.get("lastError") or {}).get("classificationFile") or {})
    since = iso(run.now) if ok and boot.mount else old.get("mountedAt")
    note: dict[str, Any] = {"deployments": [deployment[g] for g in mounted], "awaiting": list(boot.awaited)}
    if since:
        note["mountedAt"] = since
    if boot.held:
        note["held"] = [deployment[g] for g in boot.held]
    if boot.kept:
        note["kept"] = [deployment[g] for g in boot.kept]
    parts = []
    if mounted:
        parts.append(f"classification file mounted in Deployment {', '.join(note['deployments'])}"
                     + (f" since {since}" if since else "") + "; awaiting classified history of class "
                     + ", ".join(boot.awaited))
    if boot.kept:
        parts.append(f"Deployment {', '.join(note['kept'])} keep the last plan's file")
    if refused is not None:
        parts.append(f"classification file not mounted: {refused.message}")
        rec.cond(C.APPLIED, False, refused.reason, "nothing applied: " + refused.message)
    elif applied is not None and not applied.ok:
        assert applied.error is not None and applied.failed is not None
        wrote = "; ".join(applied.done) or "nothing"
        parts.append(f"classification file not mounted: {applied.error}")
        rec.cond(C.APPLIED, False, C.APPLY_FAILED, f"classification file: {applied.error}; written before it: "
                 f"{wrote}")
    elif boot.held:
        held = [f"group {g}: classification file mounted (in force (none))" for g in boot.held]
        parts.append(f"classification file not mounted: {boot.budget}")
        rec.cond(C.APPLIED, False, C.KNOBS_HELD, "nothing applied: " + boot.budget)
        rec.cond(C.ENGINE_KNOBS, False, C.KNOBS_HELD, f"held back by the disruption budget ({boot.budget}): "
                 + "; ".join(held))
    else:
        n = len(applied.done) if applied is not None else 0
        rec.cond(C.APPLIED, True, C.CLASSIFICATION_FILE_MOUNTED, "classification file (nothing reserved) in "
                 f"Deployment {', '.join(note['deployments'])}: " + (f"{n} write(s) in order" if n
                                                                    else "cluster already matched"))
    if applied is not None and "state-configmap" in applied.targets_written:
        rec.layout_changes(boot.changes)  # mirror only what the cluster holds
    failure = replace(awaited, message="; ".join([awaited.message, *parts]),
                      details={**dict(awaited.details), "classificationFile": note})
    return rec.failure(failure, changed=list(applied.done) if applied is not None else [])
