"""kvplan's vLLM plugins (the ``kvplan-vllm`` distribution, ``kvplan_vllm/pyproject.toml``, installed into a
vLLM 0.33 image by ``docker/vllm-plugin.Dockerfile``).

- :mod:`kvplan_vllm.scheduler`: ``--scheduler-cls kvplan_vllm.scheduler.ReservationScheduler`` (or
  ``AsyncReservationScheduler`` where async scheduling is on, vLLM's default on GPUs) admits a request only while
  the free KV blocks cover every admitted request's outstanding reservation plus its own (:mod:`kvcore.sim.gate`).
- :mod:`kvplan_vllm.stats`: a stat-logger plugin (entry point ``vllm.stat_logger_plugins``) exporting per-class
  output-token histograms and request/preemption counters on vLLM's ``/metrics``.
- :mod:`kvplan_vllm.source`, :mod:`kvplan_vllm.classify`: the live reader of the reservation file (whose format
  is :mod:`kvcore.reservation_file`, shared with the operator that writes it) and request classes; pure,
  importable without vLLM.

Documentation: ``docs/vllm-plugins.md``. kvcore and the operator never import this package.
"""
