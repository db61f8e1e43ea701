"""Phase 4, apply: send the built writes in stage order, stop at the first failure, and say what was done.

Order (:class:`~kvplan_operator.desired.Stage`; docs/operator.md, "Write order"): routing moves off the groups
about to change (router ConfigMap, HTTPRoute), then the state ConfigMap (reservations the Deployments' env refers
to, and the budget record of a re-layout), then the Deployments, then the planned routing. Every write is
idempotent (a merge or strategic-merge patch of owned fields, or a create that falls back to a patch), and only
writes whose values differ were built, so a re-run after a crash or a failure converges without extra writes.
Nothing here reads the cluster except a target resolving a create conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .desired import Write
from .kube import KubeApi, KubeError, classify
from .targets import Target
from .targets.state_configmap import write_configmap


@dataclass(frozen=True)
class Applied:
    """What apply did: the writes that succeeded (labels, in order), the one that failed and why (None: all done),
    and whether a re-layout write was attempted (it counts in the budget whether or not it succeeded)."""

    done: tuple[str, ...]
    failed: Write | None = None
    error: KubeError | None = None
    relayout_attempted: bool = False
    #: the targets that completed at least one write.
    targets_written: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return self.failed is None


def _in_time(w: Write) -> KubeError | None:
    return None


def apply(kube: KubeApi, namespace: str, writes: Sequence[Write], targets: Sequence[Target], *,
          late: Callable[[Write], KubeError | None] = _in_time) -> Applied:
    """Phase 4 (see the module docstring). ``late(w)``, asked before each write, stops the writes there with its
    error, as a failed write would (the cycle deadline: :func:`kvplan_operator.cycle.late_write`)."""
    by_name = {t.name: t for t in targets}
    done: list[str] = []
    wrote: set[str] = set()
    attempted = False
    for w in sorted(writes, key=lambda w: w.stage):  # stable: the targets' own order within a stage
        too_late = late(w)
        if too_late is not None:  # not sent, so not attempted
            return Applied(tuple(done), w, too_late, attempted, frozenset(wrote))
        attempted = attempted or w.relayout
        try:
            by_name[w.target].write(kube, namespace, w)
        except KubeError as exc:
            return Applied(tuple(done), w, exc, attempted, frozenset(wrote))
        except Exception as exc:  # a client bug or an unexpected error type: still a failed write, not a crash
            return Applied(tuple(done), w, classify(f"{w.verb} {w.kind}/{w.name}", exc), attempted,
                           frozenset(wrote))
        done.append(w.label)
        wrote.add(w.target)
    return Applied(tuple(done), None, None, attempted, frozenset(wrote))


def apply_detail(kube: KubeApi, namespace: str, writes: Sequence[Write], *,
                 late: Callable[[Write], KubeError | None] = _in_time) -> KubeError | None:
    """The plan's detail ConfigMaps, after the plan's own writes succeeded and before status refers to them; the
    first failure (or ``late``'s error before a write), or None."""
    for w in writes:
        too_late = late(w)
        if too_late is not None:
            return too_late
        try:
            write_configmap(kube, namespace, w)
        except KubeError as exc:
            return exc
        except Exception as exc:  # a client bug or an unexpected error type: still a failed write, not a crash
            return classify(f"{w.verb} {w.kind}/{w.name}", exc)
    return None
