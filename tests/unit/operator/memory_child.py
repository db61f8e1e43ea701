"""Child process of test_op_memory.py and benchmarks/operator_memory.py's in-process mode: ``n`` KVPlans at the caps
reconciled at once (one thread each, as kopf's workers would) with the real Prometheus client against the caps
server at ``url``, the real planner, over the fake cluster of the unit tests. Prints one JSON line: each outcome's
reason and this process's peak RSS (VmHWM, MiB) before and after."""

from __future__ import annotations

import json
import resource
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def hwm_mib() -> float:
    """This process's peak RSS (VmHWM; ru_maxrss would start from the parent's at fork), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(url: str, n: int, classes: int) -> None:
    from kvcore.planner import plan as kvcore_plan
    from kvplan_dev.prom_caps import caps_spec
    from kvplan_operator.prom import PromClient
    from kvplan_operator.reconcile import Deps, reconcile
    from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]

    try:  # the operator's runtime planner (kvplan_operator.budget), where the operator has one
        from kvplan_operator.budget import bounded_planner
        planner = bounded_planner(kvcore_plan)
    except ImportError:
        planner = kvcore_plan
    before = hwm_mib()
    reasons: list[str] = [""] * n

    def one(i: int) -> None:
        name = f"caps{i}"
        kube = FakeKube(deployments={f"{name}-vllm": dep(f"{name}-vllm")})
        spec = caps_spec(url, name=name, classes=classes)
        spec["groups"][0]["engine"] = {"knobs": "Formula"}
        fields = getattr(Deps, "__dataclass_fields__", {})
        extra = {"cycle_deadline_s": 600.0} if "cycle_deadline_s" in fields else {}  # also an operator before it
        deps = Deps(kube=kube, prom_factory=PromClient.connect, planner=planner, resolve=lambda h: ["127.0.0.1"],
                    **extra)
        out = reconcile(kvplan(spec, kube, name=name), deps)
        reasons[i] = f"{out.reason}: {out.message[:200]}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = hwm_mib()
    print(json.dumps({"reasons": reasons, "rss_before_mib": round(before, 1), "peak_rss_mib": round(peak, 1)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 256)
