"""kvcore: the pure planning core of kvplan, and its public API.

Only numpy, scipy, highspy and pydantic are imported by the planning modules; kvcore never imports kopf,
kubernetes or vllm, and the operator (``kvplan_operator``) depends on kvcore, never the reverse.

Every name below is what the operator, kvplan's vLLM plugins, kvplan_dev and the benchmarks use, importable as
``from kvcore import Plan``. The names load lazily (module ``__getattr__``, as scipy's subpackages do), so
``import kvcore`` imports nothing but this file and the serving image's plugin, which reads only the reservation
file and the histogram layouts, never pulls in scipy or highspy (the ``kvplan-vllm`` wheel carries only the
modules those names live in; ``docs/architecture.md``, "Distributions"). The packages, by layer
(``docs/architecture.md``; an import-linter contract in ``pyproject.toml`` holds the order):

- ``cli`` > ``evaluate`` > ``rules`` > ``sim`` | ``planner`` > ``reservation`` > ``history`` >
  ``profiles`` | ``reservation_file`` > ``classification`` > ``errors`` | ``bounds`` | ``catalogue`` | ``highs``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_BY_MODULE: dict[str, str] = {
    "kvcore.catalogue": "GpuType HistorySource",
    "kvcore.classification": ("ClassRule FAIRNESS_HEADER OBJECTIVE_HEADER PromptLengthRule RequestView "
                              "UNKNOWN_VALUE=UNKNOWN_CLASS_SOURCE"),
    "kvcore.errors": "InputError",
    "kvcore.evaluate": ("Cell DEFAULT_METHODS DEFAULT_RHOS DEFAULT_SHIFTS evaluate=run_evaluation Evaluation "
                        "gm_markdown ratio_cells register_policy split_episodes"),
    "kvcore.evaluate.calibration": ("compare=compare_calibration DRIFT_TOLERANCE FLOORS=CALIBRATION_FLOORS "
                                    "MIN_REQUESTS=CALIBRATION_MIN_REQUESTS overflow_from_buckets overflow_share "
                                    "predict_preemptions resolution_bound summarise=summarise_calibration "
                                    "Verdict=CalibrationVerdict"),
    "kvcore.evaluate.engine": ("capacity_rps EngineEvaluation EngineFleet EngineRow EngineSetup evaluate_engine "
                               "FRONTIER_WATERMARKS measure_row run_variant"),
    "kvcore.evaluate.harness": "request_cost",
    "kvcore.evaluate.saturation": "saturation_rps",
    "kvcore.evaluate.slo_capacity": "evaluate_slo_capacity SloEvaluation SloRow",
    "kvcore.evaluate.slo_methods": "SLO_METHODS",
    "kvcore.evaluate.slo_search": "find_slo_rate",
    "kvcore.evaluate.observe": "binned_history",
    "kvcore.evaluate.oracle": "Scenario shift_blind_bound ShiftBlindBound",
    "kvcore.evaluate.policies": "get_policy",
    "kvcore.evaluate.protocols": "episodes_for resolve_lmax",
    "kvcore.history": "series",
    "kvcore.history.bucket_model": "bucket_samples DEFAULT_MODEL MODELS Shape",
    "kvcore.history.bucketed": "class_histories ClassHistory",
    "kvcore.history.buckets": "bin_lengths Buckets SKEW_FRACTION SKEW_REQUESTS",
    "kvcore.history.samples": "BinningBound History Samples",
    "kvcore.history.series": ("ENVOY_TOKEN_TYPE ENVOY_TOKEN_USAGE kvplan_buckets KVPLAN_CLASS_LABEL "
                              "KVPLAN_OUTPUT_TOKENS LAYOUTS LLMD_OUTPUT_TOKENS vllm_buckets VLLM_CACHE_CONFIG_INFO "
                              "VLLM_GENERATION_TOKENS VLLM_GENERATION_TOKENS_ESCAPED VLLM_KV_CACHE_USAGE "
                              "VLLM_PREEMPTIONS"),
    "kvcore.history.traces": "build_1_2_5_buckets load_trace Trace",
    "kvcore.planner": "plan",
    "kvcore.planner.exact": "exact_bounds solve_exact",
    "kvcore.planner.instance": "ClassSpec CostSpec GroupSpec input_error Instance Layout",
    "kvcore.planner.limits": "BASE_BYTES FLEET_BYTES_PER_SAMPLE",
    "kvcore.planner.planmodel": "ClassPlan GroupPlan ObjectiveTerms Plan PlanStatus",
    "kvcore.planner.slo": "cost_ratio SloSpec",
    "kvcore.planner.synthetic": "generate=generate_instance",
    "kvcore.planner.synthetic_fleet": "generate_fleet",
    "kvcore.profiles": "ProfileOverride resolve=resolve_profile roofline",
    "kvcore.profiles.gpus": "CATALOGUE=GPU_CATALOGUE gpu_from_spec GpuType=GpuFigures",
    "kvcore.profiles.online": ("fit_step_law layout_model ratios=step_fit_ratios scaled_override StepFit StepLaw "
                               "StepWindow"),
    "kvcore.regular_file": "FileProblem path_identity read_regular_file",
    "kvcore.reservation": "ReservationResult reserve",
    "kvcore.reservation.exact": "solve_dro_exact",
    "kvcore.reservation.lp": "solve_dro_lp",
    "kvcore.reservation.radius": "DEFAULT_RADIUS RadiusChoice RadiusPolicy with_horizon",
    "kvcore.reservation.radius_drift": "drift_radius exposed_side Side wasserstein1_side",
    "kvcore.reservation_file": ("MAX_BYTES=MAX_RESERVATION_FILE_BYTES NO_RESERVATIONS parse_reservations "
                                "render_reservations Reservations ReservationsError"),
    "kvcore.rules.classes": "KnobClass",
    "kvcore.rules.knobs": "choose_knobs knobs_for_plan plan_groups WATERMARK_MIN_VERSION",
    "kvcore.rules.replay_set": "ReplaySet",
    "kvcore.rules.replays": "GroupReplays ReplayStore",
    "kvcore.rules.reserve": "choose_reserves class_rho engine_rho ReserveChoice reserves_for_plan",
    "kvcore.sim": "gate resample_trace SimGroup SimPolicy Workload",
    "kvcore.sim.engine": "EngineConfig GroupEngine Jobs meets_slo run_fast run_reference simulate_engine StepTiming",
    "kvcore.sim.gate": "capped_reserve",
}
"""Module -> the names read from it on first use, space-separated; ``attr=public`` renames one."""


def _public(entry: str) -> tuple[str, str]:
    """``"attr"`` -> (attr, attr); ``"attr=public"`` -> (public, attr)."""
    attr, _, public = entry.partition("=")
    return public or attr, attr


_EXPORTS: dict[str, tuple[str, str]] = {
    public: (module, attr) for module, names in _BY_MODULE.items() for public, attr in map(_public, names.split())
}
"""Public name -> (module, attribute) it is read from on first use."""

__all__ = [
    "BASE_BYTES", "bin_lengths", "CALIBRATION_FLOORS", "CALIBRATION_MIN_REQUESTS", "CalibrationVerdict",
    "compare_calibration", "DRIFT_TOLERANCE", "overflow_from_buckets", "overflow_share", "predict_preemptions",
    "resolution_bound", "summarise_calibration", "binned_history", "BinningBound", "bucket_samples", "Buckets",
    "build_1_2_5_buckets", "capacity_rps", "capped_reserve", "Cell", "choose_knobs", "choose_reserves",
    "class_histories", "class_rho", "ClassHistory", "ClassPlan", "ClassRule", "ClassSpec", "cost_ratio", "CostSpec",
    "DEFAULT_METHODS", "DEFAULT_MODEL", "DEFAULT_RADIUS", "DEFAULT_RHOS", "DEFAULT_SHIFTS", "drift_radius",
    "engine_rho", "EngineConfig", "EngineEvaluation", "EngineFleet", "EngineRow", "EngineSetup", "ENVOY_TOKEN_TYPE",
    "ENVOY_TOKEN_USAGE", "episodes_for", "evaluate_engine", "evaluate_slo_capacity", "Evaluation", "exact_bounds",
    "exposed_side", "FAIRNESS_HEADER", "FileProblem", "find_slo_rate", "fit_step_law", "FLEET_BYTES_PER_SAMPLE",
    "FRONTIER_WATERMARKS",
    "gate", "generate_fleet", "generate_instance", "get_policy", "gm_markdown", "GPU_CATALOGUE", "gpu_from_spec",
    "GpuFigures", "GpuType", "GroupEngine", "GroupPlan", "GroupReplays", "GroupSpec", "History", "HistorySource",
    "input_error", "InputError", "Instance", "Jobs", "KnobClass", "knobs_for_plan", "kvplan_buckets",
    "KVPLAN_CLASS_LABEL", "KVPLAN_OUTPUT_TOKENS", "Layout", "layout_model", "LAYOUTS", "LLMD_OUTPUT_TOKENS",
    "load_trace", "MAX_RESERVATION_FILE_BYTES", "measure_row", "meets_slo", "MODELS", "NO_RESERVATIONS",
    "OBJECTIVE_HEADER", "ObjectiveTerms", "parse_reservations", "path_identity", "plan", "Plan", "plan_groups",
    "PlanStatus",
    "ProfileOverride", "PromptLengthRule", "RadiusChoice", "RadiusPolicy", "ratio_cells", "read_regular_file",
    "register_policy", "render_reservations", "ReplaySet", "ReplayStore", "request_cost", "RequestView",
    "resample_trace", "ReservationResult", "Reservations", "ReservationsError", "reserve", "ReserveChoice",
    "reserves_for_plan", "resolve_lmax", "resolve_profile", "roofline", "run_evaluation", "run_fast",
    "run_reference", "run_variant", "Samples", "saturation_rps", "scaled_override", "Scenario", "series", "Shape",
    "shift_blind_bound", "ShiftBlindBound", "Side", "SimGroup", "SimPolicy", "simulate_engine", "SKEW_FRACTION",
    "SKEW_REQUESTS", "SLO_METHODS", "SloEvaluation", "SloRow", "SloSpec", "solve_dro_exact", "solve_dro_lp",
    "solve_exact", "split_episodes", "step_fit_ratios", "StepFit", "StepLaw", "StepTiming", "StepWindow", "Trace",
    "UNKNOWN_CLASS_SOURCE", "vllm_buckets", "VLLM_CACHE_CONFIG_INFO", "VLLM_GENERATION_TOKENS",
    "VLLM_GENERATION_TOKENS_ESCAPED", "VLLM_KV_CACHE_USAGE", "VLLM_PREEMPTIONS", "wasserstein1_side",
    "WATERMARK_MIN_VERSION", "with_horizon", "Workload",
]

if TYPE_CHECKING:
    from kvcore.catalogue import GpuType, HistorySource
    from kvcore.classification import (
        ClassRule, FAIRNESS_HEADER, OBJECTIVE_HEADER, PromptLengthRule, RequestView,
        UNKNOWN_VALUE as UNKNOWN_CLASS_SOURCE,
    )
    from kvcore.errors import InputError
    from kvcore.evaluate import (
        Cell, DEFAULT_METHODS, DEFAULT_RHOS, DEFAULT_SHIFTS, evaluate as run_evaluation, Evaluation, gm_markdown,
        ratio_cells, register_policy, split_episodes,
    )
    from kvcore.evaluate.calibration import (
        compare as compare_calibration, DRIFT_TOLERANCE, FLOORS as CALIBRATION_FLOORS,
        MIN_REQUESTS as CALIBRATION_MIN_REQUESTS, overflow_from_buckets, overflow_share, predict_preemptions,
        resolution_bound, summarise as summarise_calibration, Verdict as CalibrationVerdict,
    )
    from kvcore.evaluate.engine import (
        capacity_rps, EngineEvaluation, EngineFleet, EngineRow, EngineSetup, evaluate_engine, FRONTIER_WATERMARKS,
        measure_row, run_variant,
    )
    from kvcore.evaluate.harness import request_cost
    from kvcore.evaluate.saturation import saturation_rps
    from kvcore.evaluate.slo_capacity import evaluate_slo_capacity, SloEvaluation, SloRow
    from kvcore.evaluate.slo_methods import SLO_METHODS
    from kvcore.evaluate.slo_search import find_slo_rate
    from kvcore.evaluate.observe import binned_history
    from kvcore.evaluate.oracle import Scenario, shift_blind_bound, ShiftBlindBound
    from kvcore.evaluate.policies import get_policy
    from kvcore.evaluate.protocols import episodes_for, resolve_lmax
    from kvcore.history import series
    from kvcore.history.bucket_model import bucket_samples, DEFAULT_MODEL, MODELS, Shape
    from kvcore.history.bucketed import class_histories, ClassHistory
    from kvcore.history.buckets import bin_lengths, Buckets, SKEW_FRACTION, SKEW_REQUESTS
    from kvcore.history.samples import BinningBound, History, Samples
    from kvcore.history.series import (
        ENVOY_TOKEN_TYPE, ENVOY_TOKEN_USAGE, kvplan_buckets, KVPLAN_CLASS_LABEL, KVPLAN_OUTPUT_TOKENS, LAYOUTS,
        LLMD_OUTPUT_TOKENS, vllm_buckets, VLLM_CACHE_CONFIG_INFO, VLLM_GENERATION_TOKENS,
        VLLM_GENERATION_TOKENS_ESCAPED, VLLM_KV_CACHE_USAGE, VLLM_PREEMPTIONS,
    )
    from kvcore.history.traces import build_1_2_5_buckets, load_trace, Trace
    from kvcore.planner import plan
    from kvcore.planner.exact import exact_bounds, solve_exact
    from kvcore.planner.instance import ClassSpec, CostSpec, GroupSpec, input_error, Instance, Layout
    from kvcore.planner.limits import BASE_BYTES, FLEET_BYTES_PER_SAMPLE
    from kvcore.planner.planmodel import ClassPlan, GroupPlan, ObjectiveTerms, Plan, PlanStatus
    from kvcore.planner.slo import cost_ratio, SloSpec
    from kvcore.planner.synthetic import generate as generate_instance
    from kvcore.planner.synthetic_fleet import generate_fleet
    from kvcore.profiles import ProfileOverride, resolve as resolve_profile, roofline
    from kvcore.profiles.gpus import CATALOGUE as GPU_CATALOGUE, gpu_from_spec, GpuType as GpuFigures
    from kvcore.profiles.online import (fit_step_law, layout_model, ratios as step_fit_ratios, scaled_override,
                                        StepFit, StepLaw, StepWindow)
    from kvcore.regular_file import FileProblem, path_identity, read_regular_file
    from kvcore.reservation import ReservationResult, reserve
    from kvcore.reservation.exact import solve_dro_exact
    from kvcore.reservation.lp import solve_dro_lp
    from kvcore.reservation.radius import DEFAULT_RADIUS, RadiusChoice, RadiusPolicy, with_horizon
    from kvcore.reservation.radius_drift import drift_radius, exposed_side, Side, wasserstein1_side
    from kvcore.reservation_file import (
        MAX_BYTES as MAX_RESERVATION_FILE_BYTES, NO_RESERVATIONS, parse_reservations, render_reservations,
        Reservations, ReservationsError,
    )
    from kvcore.rules.classes import KnobClass
    from kvcore.rules.knobs import choose_knobs, knobs_for_plan, plan_groups, WATERMARK_MIN_VERSION
    from kvcore.rules.replay_set import ReplaySet
    from kvcore.rules.replays import GroupReplays, ReplayStore
    from kvcore.rules.reserve import choose_reserves, class_rho, engine_rho, ReserveChoice, reserves_for_plan
    from kvcore.sim import gate, resample_trace, SimGroup, SimPolicy, Workload
    from kvcore.sim.engine import (
        EngineConfig, GroupEngine, Jobs, meets_slo, run_fast, run_reference, simulate_engine, StepTiming,
    )
    from kvcore.sim.gate import capped_reserve


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'kvcore' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = getattr(mod, attr) if hasattr(mod, attr) else importlib.import_module(f"{module}.{attr}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
