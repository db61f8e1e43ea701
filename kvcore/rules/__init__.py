"""The engine-model rules: choices measured by replaying a group's recent history through the vLLM engine model.

- :mod:`.classes`: the rules' shared input (one class on one group) and the replay workload;
- :mod:`.replays`: the replays both rules share, and stock vLLM's run of each;
- :mod:`.knobs` and :mod:`.knob_search`: stock vLLM's knobs (``--watermark``, ``--max-num-seqs``, priorities);
- :mod:`.reserve`, :mod:`.replay_set` and :mod:`.reserve_search`: the reservations that pay under kvplan's gate;
- :mod:`.preemption`: what a preemption costs a request, in token slots.
"""
