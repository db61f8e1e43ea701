"""Request-level discrete-event simulators of vLLM-style serving groups.

Two models, chosen by the caller:

- the **reservation model** (this module's docstring, below): ``simulate(workload, groups, policy, *, rng,
  config=None) -> SimResult`` (fast) and ``simulate_reference(...)`` (slow, one decode step at a time) implement it
  and produce the same discrete dynamics (the tests compare them);
- the **vLLM engine model** (:mod:`kvcore.sim.engine`): ``simulate_engine(workload, groups, policy, *, rng,
  engine=EngineConfig(...)) -> EngineResult`` replays vLLM 0.33's own scheduling (paged blocks, optimistic
  admission, preemption by recompute, prefix caching, watermark, chunked prefill, kvplan's gate); a parity tier
  holds it to vLLM itself.

The model
---------
- **Groups and replicas.** Group k has ``replicas`` replicas with ``kv_capacity_tokens`` KV slots each (less the
  pinned prefixes, see :class:`SimConfig`). Each runs continuous batching in *steps*: a step over a batch of B
  running requests lasts ``t0 + t1 * B`` seconds and gives each of them one token.
- **Prefill.** A step in which requests are admitted is longer by ``P / prefill_tokens_per_s``, where P is the
  prefill work of the admitted requests: their input net of the cached prefix (plus, for a preempted request,
  the output tokens it had generated, which vLLM V1 recomputes). The admitting step also produces the first
  token, so TTFT = end of that step - arrival. Chunked prefill is not modelled.
- **Routing.** A request's group is drawn from its class's routing row; within the group it joins the replica
  with the fewest requests (running + queued), ties to the lowest index (join-shortest-queue).
- **Admission.** Each replica has a FCFS queue. At every step boundary (and at once when a request reaches an
  idle replica) the queue head is admitted while ``input_net + max(y, g + 1)`` fits in the free slots, where y is
  the class's reservation and g the output tokens already generated (0 for a new request). The ``+ 1`` is the
  token of the admitting step: a reservation of 0 still needs one slot. No later request overtakes a head that
  does not fit. Requests that arrive during a step wait for the next boundary (at equal times the boundary is
  processed first).
- **Past the reservation.** At each boundary, after completions, every running request whose next token has no
  allocated slot takes one free slot, in admission order. When none is free it is *preempted by recompute* (as
  in vLLM V1): it frees all its KV and goes back to the **front** of its replica's queue (several preempted at
  one boundary keep their admission order). Unlike vLLM, which evicts the newest running request, the request
  that outgrew its reservation is the one preempted: that is the event the planner's ``cp`` prices.
- **Re-admission** follows the admission rule with g > 0: it needs ``input_net + g + 1`` slots (its KV is
  recomputed from scratch; it does **not** get a fresh reservation of y on top of what it generated) and keeps
  its first-admission time and TTFT.
- **Rejections.** A request is rejected when the policy's admission draw says so, or when
  ``input_net + max(y, output)`` exceeds a replica's usable capacity (it could never finish). Both are counted
  per class; every other request finishes (conservation is checked on every run).

Randomness comes only from the injected ``numpy.random.Generator`` (:mod:`kvcore.sim.prepare`); no state is
global and nothing is written to disk except by :func:`write_json`, :func:`write_class_csv` and
:func:`write_requests_csv`.
"""

from kvcore.sim.fast import simulate
from kvcore.sim.prepare import REJECT_ADMISSION, REJECT_OVERSIZE, SERVE
from kvcore.sim.reference import simulate_reference
from kvcore.sim.result import (
    ClassStats,
    CostTerms,
    GroupStats,
    LatencyStats,
    RequestOutcomes,
    SimResult,
    write_class_csv,
    write_json,
    write_requests_csv,
)
from kvcore.sim.types import SimConfig, SimGroup, SimPolicy, Workload
from kvcore.sim.workload import resample_trace, workload_from_trace
from kvcore.sim.engine import EngineConfig, EngineResult, simulate_engine  # noqa: E402 - after the model it uses

__all__ = [
    "REJECT_ADMISSION",
    "REJECT_OVERSIZE",
    "SERVE",
    "ClassStats",
    "CostTerms",
    "EngineConfig",
    "EngineResult",
    "GroupStats",
    "LatencyStats",
    "RequestOutcomes",
    "SimConfig",
    "SimGroup",
    "SimPolicy",
    "SimResult",
    "Workload",
    "resample_trace",
    "simulate",
    "simulate_engine",
    "simulate_reference",
    "workload_from_trace",
    "write_class_csv",
    "write_json",
    "write_requests_csv",
]
