"""kvplan's reservation-gated schedulers for vLLM 0.33: ``--scheduler-cls kvplan_vllm.scheduler.ReservationScheduler``
(vLLM's synchronous V1 ``Scheduler``) or ``kvplan_vllm.scheduler.AsyncReservationScheduler`` (``AsyncScheduler``;
use this one where async scheduling is on, vLLM's default on GPUs).

The rule is :mod:`kvcore.sim.gate`'s, unchanged: a waiting or preempted request is admitted only while the free KV
blocks cover the outstanding claim of every admitted request plus its own, each claim being the blocks of its
reserved footprint ``P + max(y, G)`` it does not hold yet (``y``: its class's reserve from the reservation file;
``P``: prompt tokens; ``G``: output tokens generated so far). Otherwise admission stops for this step
(head-of-line), exactly like a prompt that does not fit.

The hook. vLLM 0.33 has no admission hook. ``Scheduler.schedule()`` admits the head of the waiting queue by
calling ``self.kv_cache_manager.allocate_slots(request, ...)``; a ``None`` answer means "does not fit" and ends the
admission loop for the step (``break``), keeping the queue order. This module wraps that one bound method on the
scheduler's own ``KVCacheManager`` instance and answers ``None`` for a WAITING/PREEMPTED request that the gate
refuses; RUNNING requests (the decode loop) pass straight through, so block growth and vLLM's preemption are
untouched. The other candidate, overriding ``_handle_blocked_waiting_request``, would ``skip_request`` the head and
let later requests overtake it, which is not the rule.

The reserve of a request is its class's ``reserveTokens``, capped at what the request can ever hold
(``min(max_model_len, per-group KV capacity) - P``), so a request whose reservation exceeds the whole cache is not
blocked forever: with nothing running it is admitted exactly when vLLM would admit it.

A request's class is :func:`kvplan_vllm.classify.class_in_engine` on what the engine sees (``vllm_xargs``, the LoRA
adapter or else the first served model name, the priority, the prompt length). Where the file publishes ``defaultPriority``, a request whose priority
is no class's runs with that priority (:func:`kvplan_vllm.classify.engine_priority`, set as vLLM queues it), so
untagged traffic never runs ahead of a planned class under ``--scheduling-policy priority``. A class channel naming
nothing the file knows gives the fleet default, counted in ``kvplan_unknown_class_requests_total{channel}``
(:mod:`kvplan_vllm.metrics`) and logged once per value.
"""

from __future__ import annotations

import inspect
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from kvcore import gate
from kvplan_vllm.classify import FROM_XARGS, UNKNOWN_TO_DEFAULT, XARGS_KEY, class_in_engine, engine_priority
from kvcore import Reservations
from kvplan_vllm.metrics import unknown_class_counter
from kvplan_vllm.source import ReservationSource, logger

_ADMITTING = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
#: Distinct unknown class names logged (each once); beyond this one more line says logging stopped.
_MAX_UNKNOWN_LOGGED = 32
#: Attribute cached on a vLLM ``Request``: (source version, class, reserve tokens).
_CACHE_ATTR = "_kvplan_class"
#: Attribute set on a vLLM ``Request`` as it arrives: the priority it came with (before ``defaultPriority``).
_OWN_PRIORITY_ATTR = "_kvplan_own_priority"
#: The channel label of an unknown priority.
FROM_PRIORITY = "priority"


class ReservationGateMixin:
    """The gate, for any vLLM V1 ``Scheduler`` subclass (mixed in before it)."""

    kv_cache_manager: Any
    running: list[Request]
    max_model_len: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kvplan_source = ReservationSource()
        self.kvplan_source.check()  # before the first step; bounded whatever the file (kvplan_vllm.source)
        self.kvplan_source.start()  # later checks run on the source's reader thread, never in schedule()
        #: Admissions the gate refused (each one stopped admission for its step).
        self.kvplan_refusals = 0
        self._kvplan_failed = False
        #: (running requests counted, sum of their claims) inside a schedule() call, else None.
        self._kvplan_step: tuple[int, int] | None = None
        self._kvplan_unknown: set[str] = set()
        #: The model a request without a LoRA adapter names, as vLLM keeps it: the first ``--served-model-name``.
        self.kvplan_model = str(getattr(self, "vllm_config").model_config.served_model_name)
        manager = self.kv_cache_manager
        self._kvplan_groups = [(m.req_to_blocks, int(m.block_size)) for m in manager.coordinator.single_type_managers]
        usable_blocks = manager.block_pool.get_num_free_blocks() // max(1, len(self._kvplan_groups))
        #: The most tokens one request can ever hold: the model's length limit or the KV cache, whichever is less.
        self.kvplan_request_capacity = min(
            int(self.max_model_len), min(usable_blocks * bs for _, bs in self._kvplan_groups)
        )
        self._kvplan_allocate = manager.allocate_slots
        self._kvplan_signature = inspect.signature(self._kvplan_allocate)
        manager.allocate_slots = self._kvplan_allocate_slots  # the instance attribute shadows the method
        async_on = bool(getattr(self, "vllm_config").scheduler_config.async_scheduling)
        logger.info("kvplan: reservation gate on (%s, async scheduling %s, file %s, checked every %d steps); %s",
                    type(self).__name__, "on" if async_on else "off", self.kvplan_source.path,
                    self.kvplan_source.check_every, self.kvplan_source.current.describe())
        if async_on and not isinstance(self, AsyncScheduler):
            logger.warning("kvplan: async scheduling is on but %s is vLLM's synchronous Scheduler; use "
                           "--scheduler-cls kvplan_vllm.scheduler.AsyncReservationScheduler (or "
                           "--no-async-scheduling)", type(self).__name__)

    # -- the hook ---------------------------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        try:
            self._kvplan_arrived(request)
        except Exception:  # noqa: BLE001 - never refuse a request over its class: keep vLLM's priority, say so once
            self._kvplan_fail_once("class error on arrival; keeping the request's own priority")
        super().add_request(request)  # type: ignore[misc]

    def _kvplan_arrived(self, request: Request) -> None:
        """Counts (and logs once) a class channel naming nothing the file knows, then gives a request of no class
        the file's ``defaultPriority``; the priority it came with is kept for its class."""
        res = self.kvplan_source.current
        own = int(request.priority)
        setattr(request, _OWN_PRIORITY_ATTR, own)
        extra = request.sampling_params.extra_args if request.sampling_params is not None else None
        lora = request.lora_request
        _, how = class_in_engine(res, extra, own, request.num_prompt_tokens,
                                 lora.lora_name if lora is not None else self.kvplan_model)
        if how == UNKNOWN_TO_DEFAULT:
            named = extra is not None and XARGS_KEY in extra
            self._kvplan_log_unknown(FROM_XARGS if named else FROM_PRIORITY,
                                     extra.get(XARGS_KEY) if named and extra else own, res)
        request.priority = engine_priority(res, own)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self.kvplan_source.tick()  # no file access: adopts what the reader thread published
        except Exception:  # noqa: BLE001 - never out of schedule(): keep the values in force, say so once
            self._kvplan_fail_once("reservation source error")
        # Within one schedule() call the waiting loop only appends admitted requests to `running` (vLLM preempts
        # only in the running loop, before it), so the running claims are summed once per step and extended by
        # each admission (see _kvplan_claims_sum).
        self._kvplan_step = (0, 0)
        try:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._kvplan_step = None

    def _kvplan_allocate_slots(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if request.status in _ADMITTING:
            try:
                admitted = self.kvplan_admits(request, args, kwargs)
            except Exception:  # noqa: BLE001 - the gate must never take the engine down: fail open, say so once
                admitted = True
                self._kvplan_fail_once("gate error; admitting as vLLM would until the engine restarts")
            if not admitted:
                self.kvplan_refusals += 1
                return None
        return self._kvplan_allocate(request, *args, **kwargs)

    def _kvplan_fail_once(self, what: str) -> None:
        if not self._kvplan_failed:
            self._kvplan_failed = True
            logger.exception("kvplan: %s", what)

    def shutdown(self) -> None:
        self.kvplan_source.close()
        parent = getattr(super(), "shutdown", None)
        if parent is not None:
            parent()

    # -- the rule, on vLLM's objects ----------------------------------------------------------------------------
    def kvplan_class(self, request: Request) -> tuple[str, int]:
        """``(class, reserve tokens)`` of a request under the reservations in force (cached per file version)."""
        source = self.kvplan_source
        cached = getattr(request, _CACHE_ATTR, None)
        if cached is not None and cached[0] == source.state.version:
            return cached[1], cached[2]
        res = source.current
        params = request.sampling_params
        extra = params.extra_args if params is not None else None
        lora = request.lora_request
        model = lora.lora_name if lora is not None else self.kvplan_model
        klass, _ = class_in_engine(res, extra, getattr(request, _OWN_PRIORITY_ATTR, request.priority),
                                   request.num_prompt_tokens, model)
        reserve = gate.capped_reserve(res.reserve(klass), request.num_prompt_tokens, self.kvplan_request_capacity)
        setattr(request, _CACHE_ATTR, (source.state.version, klass, reserve))
        return klass, reserve

    def _kvplan_generated(self, request: Request) -> int:
        # Output tokens held or being computed (async scheduling counts in-flight tokens as placeholders).
        return int(request.num_output_tokens) + int(request.num_output_placeholders)

    def _kvplan_claim(self, r: Request) -> int:
        _, reserve = self.kvplan_class(r)
        generated = self._kvplan_generated(r)
        return sum(gate.running_claim(r.num_prompt_tokens, generated, reserve, len(blocks.get(r.request_id, ())), bs)
                   for blocks, bs in self._kvplan_groups)

    def kvplan_running_claims(self) -> list[int]:
        """Outstanding claim (blocks) of every running request."""
        return [self._kvplan_claim(r) for r in self.running]

    def _kvplan_claims_sum(self) -> int:
        """Sum of the running claims: in a schedule() call, the requests counted at the step's first admission
        attempt plus those admitted since; outside one, all of them."""
        step = self._kvplan_step
        running = self.running
        if step is None or step[0] > len(running):
            return sum(self.kvplan_running_claims())
        counted, total = step
        if len(self._kvplan_groups) != 1:
            for r in running[counted:]:
                total += self._kvplan_claim(r)
        else:
            # The usual case, one KV group: the same sum as _kvplan_claim's, with the per-request lookups inlined
            # (this loop runs over every running request once per step with a waiting head).
            blocks, block_size = self._kvplan_groups[0]
            version = self.kvplan_source.state.version
            claim = gate.running_claim
            for r in running[counted:]:
                cached = r.__dict__.get(_CACHE_ATTR)
                reserve = cached[2] if cached is not None and cached[0] == version else self.kvplan_class(r)[1]
                generated = r.num_output_tokens + r.num_output_placeholders
                total += claim(r.num_prompt_tokens, generated, reserve, len(blocks.get(r.request_id, ())), block_size)
        self._kvplan_step = (len(running), total)
        return total

    def kvplan_admits(self, request: Request, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> bool:
        """The gate for ``request`` with the arguments vLLM passes to ``allocate_slots`` (prefix-cache hits)."""
        if not self.kvplan_source.current.reserve_tokens:
            return True  # no reservation file yet: vLLM's own admission
        bound = self._kvplan_signature.bind_partial(request, *args, **(kwargs or {})).arguments
        cached_tokens = (int(request.num_computed_tokens) + int(bound.get("num_new_computed_tokens", 0))
                         + int(bound.get("num_external_computed_tokens", 0)))
        hit = bound.get("new_computed_blocks")
        # Cached blocks nobody references are counted as free; taking the hit removes them from the free count.
        evictable_hit = sum(1 for group in (hit.blocks if hit is not None else ()) for b in group
                            if b.ref_cnt == 0 and not getattr(b, "is_null", False))
        free = int(self.kv_cache_manager.block_pool.get_num_free_blocks()) - evictable_hit
        _, reserve = self.kvplan_class(request)
        generated = self._kvplan_generated(request)
        own = sum(gate.waiting_claim(request.num_prompt_tokens, generated, reserve, cached_tokens, bs)
                  for _, bs in self._kvplan_groups)
        return gate.admits(free, (self._kvplan_claims_sum(),), own)

    def _kvplan_log_unknown(self, channel: str, name: object, res: Reservations) -> None:
        unknown_class_counter().labels(channel).inc()
        key = f"{channel}={name!r}"
        if key in self._kvplan_unknown:
            return
        if len(self._kvplan_unknown) >= _MAX_UNKNOWN_LOGGED:
            if len(self._kvplan_unknown) == _MAX_UNKNOWN_LOGGED:
                self._kvplan_unknown.add("(more)")
                logger.warning("kvplan: more than %d unknown class values; no longer logging them",
                               _MAX_UNKNOWN_LOGGED)
            return
        self._kvplan_unknown.add(key)
        what = f"vllm_xargs {XARGS_KEY}={name!r}" if channel == FROM_XARGS else f"priority {name!r}"
        logger.warning("kvplan: %s names no class of the reservation file (%s); such requests get the fleet "
                       "default %r", what, ", ".join(sorted(res.reserve_tokens)) or "none", res.default_class)


class ReservationScheduler(ReservationGateMixin, Scheduler):
    """vLLM's V1 ``Scheduler`` with kvplan's reservation gate (``--scheduler-cls``; synchronous scheduling)."""


class AsyncReservationScheduler(ReservationGateMixin, AsyncScheduler):
    """vLLM's ``AsyncScheduler`` with kvplan's reservation gate (async scheduling, vLLM's default on GPUs)."""
