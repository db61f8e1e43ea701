"""The evaluation harness: reservation policies replayed on real traces under the split and rolling protocols.

- :mod:`.protocols`: which history each plan sees and which shifted requests it serves (split, rolling);
- :mod:`.policies`: the registry of policies (``default``, ``dro-paper``, ``saa``, quantiles, ...);
- :mod:`.harness`: :func:`evaluate` scores every (shift, rho, policy) of one trace, giving :class:`Evaluation`;
- :mod:`.simulate`: ``--simulate``, the same requests through the vLLM engine model with kvplan's gate, on the
  one evaluation fleet (:class:`~kvcore.evaluate.engine.EngineFleet`);
- :mod:`.engine`: ``--engine vllm``, stock vLLM, kvplan's knobs and its plugin; the fleet, load and goodput;
- :mod:`.saturation`: the one definition of load, arrival rate over the saturation rate measured in the engine model;
- :mod:`.slo_capacity`, :mod:`.slo_methods`, :mod:`.slo_search`: ``--slo-capacity``, each method's highest arrival
  rate within an SLO, the methods it compares and the bracket-then-bisect search;
- :mod:`.summary`: gm of cost / best across traces (the yardstick policies are scored by);
- :mod:`.oracle`: bounds on the best a shift-blind rule can do under the split protocol (with the test data);
- :mod:`.report`: CSV, Markdown and PNG files (matplotlib imported lazily).
"""

from __future__ import annotations

from kvcore.evaluate.harness import DEFAULT_RHOS, DEFAULT_SHIFTS, Evaluation, Row, evaluate, request_cost
from kvcore.evaluate.policies import DEFAULT_METHODS, POLICIES, Policy, get_policy, register_policy
from kvcore.evaluate.protocols import (
    PROTOCOLS,
    Episode,
    RollingSchedule,
    episodes_for,
    rolling_episodes,
    rolling_schedule,
    shift_outputs,
    split_episodes,
)
from kvcore.evaluate.summary import GM_POLICIES, Cell, gm_markdown, ratio_cells

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_RHOS",
    "DEFAULT_SHIFTS",
    "GM_POLICIES",
    "POLICIES",
    "PROTOCOLS",
    "Cell",
    "Episode",
    "Evaluation",
    "Policy",
    "RollingSchedule",
    "Row",
    "episodes_for",
    "evaluate",
    "get_policy",
    "gm_markdown",
    "ratio_cells",
    "register_policy",
    "request_cost",
    "rolling_episodes",
    "rolling_schedule",
    "shift_outputs",
    "split_episodes",
]
