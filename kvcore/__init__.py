"""kvcore: the pure planning core of kvplan, and its public API.

Only numpy, scipy, highspy and pydantic are imported by the planning modules; kvcore never imports kopf,
kubernetes or vllm, and the operator (``kvplan_operator``) depends on kvcore, never the reverse.

Every name below is what the operator, kvplan's vLLM plugins, kvplan_dev and the benchmarks use, importable as
``from kvcore import Plan``. The names load lazily (module ``__getattr__``, as scipy's subpackages do), so
``import kvcore`` imports nothing but this file and the serving image's plugin, which reads only the reservation
file and the histogram layouts, never pulls in scipy or highspy. The packages, by layer (``docs/architecture.md``;
an import-linter contract in ``pyproject.toml`` holds the order):

- ``cli`` > ``evaluate`` > ``rules`` > ``sim`` | ``planner`` > ``reservation`` > ``history`` >
  ``profiles`` | ``reservation_file`` > ``errors`` | ``bounds`` | ``catalogue`` | ``highs``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, tuple[str, str]] = {
    "read_regular_file": ("kvcore.regular_file", "read_regular_file"),
    "path_identity": ("kvcore.regular_file", "path_identity"),
    "FileProblem": ("kvcore.regular_file", "FileProblem"),
    "MAX_RESERVATION_FILE_BYTES": ("kvcore.reservation_file", "MAX_BYTES"),
    "FLEET_BYTES_PER_SAMPLE": ("kvcore.planner.limits", "FLEET_BYTES_PER_SAMPLE"),
    "BASE_BYTES": ("kvcore.planner.limits", "BASE_BYTES"),
    "HistorySource": ("kvcore.catalogue", "HistorySource"),
    "GpuType": ("kvcore.catalogue", "GpuType"),
    "InputError": ("kvcore.errors", "InputError"),
    "Cell": ("kvcore.evaluate", "Cell"),
    "DEFAULT_METHODS": ("kvcore.evaluate", "DEFAULT_METHODS"),
    "DEFAULT_RHOS": ("kvcore.evaluate", "DEFAULT_RHOS"),
    "DEFAULT_SHIFTS": ("kvcore.evaluate", "DEFAULT_SHIFTS"),
    "run_evaluation": ("kvcore.evaluate", "evaluate"),
    "Evaluation": ("kvcore.evaluate", "Evaluation"),
    "gm_markdown": ("kvcore.evaluate", "gm_markdown"),
    "ratio_cells": ("kvcore.evaluate", "ratio_cells"),
    "register_policy": ("kvcore.evaluate", "register_policy"),
    "split_episodes": ("kvcore.evaluate", "split_episodes"),
    "capacity_rps": ("kvcore.evaluate.engine", "capacity_rps"),
    "EngineEvaluation": ("kvcore.evaluate.engine", "EngineEvaluation"),
    "EngineFleet": ("kvcore.evaluate.engine", "EngineFleet"),
    "EngineRow": ("kvcore.evaluate.engine", "EngineRow"),
    "EngineSetup": ("kvcore.evaluate.engine", "EngineSetup"),
    "evaluate_engine": ("kvcore.evaluate.engine", "evaluate_engine"),
    "FRONTIER_WATERMARKS": ("kvcore.evaluate.engine", "FRONTIER_WATERMARKS"),
    "measure_row": ("kvcore.evaluate.engine", "measure_row"),
    "run_variant": ("kvcore.evaluate.engine", "run_variant"),
    "evaluate_slo_capacity": ("kvcore.evaluate.slo_capacity", "evaluate_slo_capacity"),
    "saturation_rps": ("kvcore.evaluate.saturation", "saturation_rps"),
    "SloEvaluation": ("kvcore.evaluate.slo_capacity", "SloEvaluation"),
    "SloRow": ("kvcore.evaluate.slo_capacity", "SloRow"),
    "SLO_METHODS": ("kvcore.evaluate.slo_methods", "SLO_METHODS"),
    "find_slo_rate": ("kvcore.evaluate.slo_search", "find_slo_rate"),
    "request_cost": ("kvcore.evaluate.harness", "request_cost"),
    "binned_history": ("kvcore.evaluate.observe", "binned_history"),
    "Scenario": ("kvcore.evaluate.oracle", "Scenario"),
    "shift_blind_bound": ("kvcore.evaluate.oracle", "shift_blind_bound"),
    "ShiftBlindBound": ("kvcore.evaluate.oracle", "ShiftBlindBound"),
    "get_policy": ("kvcore.evaluate.policies", "get_policy"),
    "episodes_for": ("kvcore.evaluate.protocols", "episodes_for"),
    "resolve_lmax": ("kvcore.evaluate.protocols", "resolve_lmax"),
    "series": ("kvcore.history", "series"),
    "bucket_samples": ("kvcore.history.bucket_model", "bucket_samples"),
    "DEFAULT_MODEL": ("kvcore.history.bucket_model", "DEFAULT_MODEL"),
    "MODELS": ("kvcore.history.bucket_model", "MODELS"),
    "Shape": ("kvcore.history.bucket_model", "Shape"),
    "class_histories": ("kvcore.history.bucketed", "class_histories"),
    "ClassHistory": ("kvcore.history.bucketed", "ClassHistory"),
    "bin_lengths": ("kvcore.history.buckets", "bin_lengths"),
    "Buckets": ("kvcore.history.buckets", "Buckets"),
    "SKEW_FRACTION": ("kvcore.history.buckets", "SKEW_FRACTION"),
    "SKEW_REQUESTS": ("kvcore.history.buckets", "SKEW_REQUESTS"),
    "BinningBound": ("kvcore.history.samples", "BinningBound"),
    "History": ("kvcore.history.samples", "History"),
    "Samples": ("kvcore.history.samples", "Samples"),
    "ENVOY_TOKEN_TYPE": ("kvcore.history.series", "ENVOY_TOKEN_TYPE"),
    "ENVOY_TOKEN_USAGE": ("kvcore.history.series", "ENVOY_TOKEN_USAGE"),
    "kvplan_buckets": ("kvcore.history.series", "kvplan_buckets"),
    "KVPLAN_CLASS_LABEL": ("kvcore.history.series", "KVPLAN_CLASS_LABEL"),
    "KVPLAN_OUTPUT_TOKENS": ("kvcore.history.series", "KVPLAN_OUTPUT_TOKENS"),
    "LAYOUTS": ("kvcore.history.series", "LAYOUTS"),
    "LLMD_OUTPUT_TOKENS": ("kvcore.history.series", "LLMD_OUTPUT_TOKENS"),
    "vllm_buckets": ("kvcore.history.series", "vllm_buckets"),
    "VLLM_CACHE_CONFIG_INFO": ("kvcore.history.series", "VLLM_CACHE_CONFIG_INFO"),
    "VLLM_GENERATION_TOKENS": ("kvcore.history.series", "VLLM_GENERATION_TOKENS"),
    "VLLM_GENERATION_TOKENS_ESCAPED": ("kvcore.history.series", "VLLM_GENERATION_TOKENS_ESCAPED"),
    "VLLM_KV_CACHE_USAGE": ("kvcore.history.series", "VLLM_KV_CACHE_USAGE"),
    "VLLM_PREEMPTIONS": ("kvcore.history.series", "VLLM_PREEMPTIONS"),
    "build_1_2_5_buckets": ("kvcore.history.traces", "build_1_2_5_buckets"),
    "load_trace": ("kvcore.history.traces", "load_trace"),
    "Trace": ("kvcore.history.traces", "Trace"),
    "plan": ("kvcore.planner", "plan"),
    "exact_bounds": ("kvcore.planner.exact", "exact_bounds"),
    "solve_exact": ("kvcore.planner.exact", "solve_exact"),
    "ClassSpec": ("kvcore.planner.instance", "ClassSpec"),
    "CostSpec": ("kvcore.planner.instance", "CostSpec"),
    "GroupSpec": ("kvcore.planner.instance", "GroupSpec"),
    "input_error": ("kvcore.planner.instance", "input_error"),
    "Instance": ("kvcore.planner.instance", "Instance"),
    "Layout": ("kvcore.planner.instance", "Layout"),
    "ClassPlan": ("kvcore.planner.planmodel", "ClassPlan"),
    "GroupPlan": ("kvcore.planner.planmodel", "GroupPlan"),
    "ObjectiveTerms": ("kvcore.planner.planmodel", "ObjectiveTerms"),
    "Plan": ("kvcore.planner.planmodel", "Plan"),
    "PlanStatus": ("kvcore.planner.planmodel", "PlanStatus"),
    "cost_ratio": ("kvcore.planner.slo", "cost_ratio"),
    "SloSpec": ("kvcore.planner.slo", "SloSpec"),
    "generate_instance": ("kvcore.planner.synthetic", "generate"),
    "generate_fleet": ("kvcore.planner.synthetic_fleet", "generate_fleet"),
    "ProfileOverride": ("kvcore.profiles", "ProfileOverride"),
    "GPU_CATALOGUE": ("kvcore.profiles.gpus", "CATALOGUE"),
    "resolve_profile": ("kvcore.profiles", "resolve"),
    "roofline": ("kvcore.profiles", "roofline"),
    "ReservationResult": ("kvcore.reservation", "ReservationResult"),
    "reserve": ("kvcore.reservation", "reserve"),
    "solve_dro_exact": ("kvcore.reservation.exact", "solve_dro_exact"),
    "solve_dro_lp": ("kvcore.reservation.lp", "solve_dro_lp"),
    "DEFAULT_RADIUS": ("kvcore.reservation.radius", "DEFAULT_RADIUS"),
    "RadiusChoice": ("kvcore.reservation.radius", "RadiusChoice"),
    "RadiusPolicy": ("kvcore.reservation.radius", "RadiusPolicy"),
    "with_horizon": ("kvcore.reservation.radius", "with_horizon"),
    "drift_radius": ("kvcore.reservation.radius_drift", "drift_radius"),
    "exposed_side": ("kvcore.reservation.radius_drift", "exposed_side"),
    "Side": ("kvcore.reservation.radius_drift", "Side"),
    "wasserstein1_side": ("kvcore.reservation.radius_drift", "wasserstein1_side"),
    "NO_RESERVATIONS": ("kvcore.reservation_file", "NO_RESERVATIONS"),
    "parse_reservations": ("kvcore.reservation_file", "parse_reservations"),
    "PromptLengthRule": ("kvcore.reservation_file", "PromptLengthRule"),
    "render_reservations": ("kvcore.reservation_file", "render_reservations"),
    "Reservations": ("kvcore.reservation_file", "Reservations"),
    "ReservationsError": ("kvcore.reservation_file", "ReservationsError"),
    "KnobClass": ("kvcore.rules.classes", "KnobClass"),
    "choose_knobs": ("kvcore.rules.knobs", "choose_knobs"),
    "knobs_for_plan": ("kvcore.rules.knobs", "knobs_for_plan"),
    "plan_groups": ("kvcore.rules.knobs", "plan_groups"),
    "WATERMARK_MIN_VERSION": ("kvcore.rules.knobs", "WATERMARK_MIN_VERSION"),
    "ReplaySet": ("kvcore.rules.replay_set", "ReplaySet"),
    "GroupReplays": ("kvcore.rules.replays", "GroupReplays"),
    "ReplayStore": ("kvcore.rules.replays", "ReplayStore"),
    "choose_reserves": ("kvcore.rules.reserve", "choose_reserves"),
    "class_rho": ("kvcore.rules.reserve", "class_rho"),
    "engine_rho": ("kvcore.rules.reserve", "engine_rho"),
    "ReserveChoice": ("kvcore.rules.reserve", "ReserveChoice"),
    "reserves_for_plan": ("kvcore.rules.reserve", "reserves_for_plan"),
    "gate": ("kvcore.sim", "gate"),
    "resample_trace": ("kvcore.sim", "resample_trace"),
    "SimGroup": ("kvcore.sim", "SimGroup"),
    "SimPolicy": ("kvcore.sim", "SimPolicy"),
    "Workload": ("kvcore.sim", "Workload"),
    "EngineConfig": ("kvcore.sim.engine", "EngineConfig"),
    "GroupEngine": ("kvcore.sim.engine", "GroupEngine"),
    "meets_slo": ("kvcore.sim.engine", "meets_slo"),
    "Jobs": ("kvcore.sim.engine", "Jobs"),
    "run_fast": ("kvcore.sim.engine", "run_fast"),
    "run_reference": ("kvcore.sim.engine", "run_reference"),
    "simulate_engine": ("kvcore.sim.engine", "simulate_engine"),
    "StepTiming": ("kvcore.sim.engine", "StepTiming"),
    "capped_reserve": ("kvcore.sim.gate", "capped_reserve"),
}
"""Public name -> (module, attribute) it is read from on first use."""

__all__ = [
    "BASE_BYTES", "bin_lengths", "binned_history", "BinningBound", "bucket_samples", "Buckets",
    "build_1_2_5_buckets", "capacity_rps", "capped_reserve", "Cell", "choose_knobs", "choose_reserves",
    "class_histories", "class_rho", "ClassHistory", "ClassPlan", "ClassSpec", "cost_ratio", "CostSpec",
    "DEFAULT_METHODS", "DEFAULT_MODEL", "DEFAULT_RADIUS", "DEFAULT_RHOS", "DEFAULT_SHIFTS", "drift_radius",
    "engine_rho", "EngineConfig", "EngineEvaluation", "EngineFleet", "EngineRow", "EngineSetup", "ENVOY_TOKEN_TYPE",
    "ENVOY_TOKEN_USAGE", "episodes_for", "evaluate_engine", "evaluate_slo_capacity", "Evaluation", "exact_bounds", "exposed_side",
    "FileProblem", "find_slo_rate", "FLEET_BYTES_PER_SAMPLE", "FRONTIER_WATERMARKS", "gate", "generate_fleet", "generate_instance",
    "get_policy", "gm_markdown", "GPU_CATALOGUE", "GpuType", "GroupEngine", "GroupPlan", "GroupReplays",
    "GroupSpec", "History", "HistorySource", "input_error", "InputError", "Instance", "Jobs", "KnobClass",
    "knobs_for_plan", "kvplan_buckets", "KVPLAN_CLASS_LABEL", "KVPLAN_OUTPUT_TOKENS", "Layout", "LAYOUTS",
    "LLMD_OUTPUT_TOKENS", "load_trace", "MAX_RESERVATION_FILE_BYTES", "measure_row", "meets_slo", "MODELS",
    "NO_RESERVATIONS", "ObjectiveTerms", "parse_reservations", "path_identity", "plan", "Plan", "plan_groups",
    "PlanStatus", "ProfileOverride", "PromptLengthRule", "RadiusChoice", "RadiusPolicy", "ratio_cells",
    "read_regular_file", "register_policy", "render_reservations", "ReplaySet", "ReplayStore", "request_cost",
    "resample_trace", "ReservationResult", "Reservations", "ReservationsError", "reserve", "ReserveChoice",
    "reserves_for_plan", "resolve_lmax", "resolve_profile", "roofline", "run_evaluation", "run_fast",
    "run_reference", "run_variant", "Samples", "saturation_rps", "Scenario", "series", "Shape", "shift_blind_bound",
    "ShiftBlindBound", "Side", "SimGroup", "SimPolicy", "simulate_engine", "SKEW_FRACTION", "SKEW_REQUESTS",
    "SLO_METHODS", "SloEvaluation", "SloRow", "SloSpec", "solve_dro_exact", "solve_dro_lp", "solve_exact", "split_episodes", "StepTiming", "Trace",
    "vllm_buckets", "VLLM_CACHE_CONFIG_INFO", "VLLM_GENERATION_TOKENS", "VLLM_GENERATION_TOKENS_ESCAPED",
    "VLLM_KV_CACHE_USAGE", "VLLM_PREEMPTIONS", "wasserstein1_side", "WATERMARK_MIN_VERSION", "with_horizon",
    "Workload",
]

if TYPE_CHECKING:
    from kvcore.catalogue import GpuType as GpuType
    from kvcore.regular_file import read_regular_file as read_regular_file
    from kvcore.regular_file import path_identity as path_identity
    from kvcore.regular_file import FileProblem as FileProblem
    from kvcore.reservation_file import MAX_BYTES as MAX_RESERVATION_FILE_BYTES
    from kvcore.planner.limits import FLEET_BYTES_PER_SAMPLE as FLEET_BYTES_PER_SAMPLE
    from kvcore.planner.limits import BASE_BYTES as BASE_BYTES
    from kvcore.catalogue import HistorySource as HistorySource
    from kvcore.errors import InputError as InputError
    from kvcore.evaluate import Cell as Cell
    from kvcore.evaluate import DEFAULT_METHODS as DEFAULT_METHODS
    from kvcore.evaluate import DEFAULT_RHOS as DEFAULT_RHOS
    from kvcore.evaluate import DEFAULT_SHIFTS as DEFAULT_SHIFTS
    from kvcore.evaluate import evaluate as run_evaluation
    from kvcore.evaluate import Evaluation as Evaluation
    from kvcore.evaluate import gm_markdown as gm_markdown
    from kvcore.evaluate import ratio_cells as ratio_cells
    from kvcore.evaluate import register_policy as register_policy
    from kvcore.evaluate import split_episodes as split_episodes
    from kvcore.evaluate.engine import capacity_rps as capacity_rps
    from kvcore.evaluate.engine import EngineEvaluation as EngineEvaluation
    from kvcore.evaluate.engine import EngineFleet as EngineFleet
    from kvcore.evaluate.engine import EngineRow as EngineRow
    from kvcore.evaluate.engine import EngineSetup as EngineSetup
    from kvcore.evaluate.engine import evaluate_engine as evaluate_engine
    from kvcore.evaluate.engine import FRONTIER_WATERMARKS as FRONTIER_WATERMARKS
    from kvcore.evaluate.engine import measure_row as measure_row
    from kvcore.evaluate.engine import run_variant as run_variant
    from kvcore.evaluate.slo_capacity import evaluate_slo_capacity as evaluate_slo_capacity
    from kvcore.evaluate.saturation import saturation_rps as saturation_rps
    from kvcore.evaluate.slo_capacity import SloEvaluation as SloEvaluation
    from kvcore.evaluate.slo_capacity import SloRow as SloRow
    from kvcore.evaluate.slo_methods import SLO_METHODS as SLO_METHODS
    from kvcore.evaluate.slo_search import find_slo_rate as find_slo_rate
    from kvcore.evaluate.harness import request_cost as request_cost
    from kvcore.evaluate.observe import binned_history as binned_history
    from kvcore.evaluate.oracle import Scenario as Scenario
    from kvcore.evaluate.oracle import shift_blind_bound as shift_blind_bound
    from kvcore.evaluate.oracle import ShiftBlindBound as ShiftBlindBound
    from kvcore.evaluate.policies import get_policy as get_policy
    from kvcore.evaluate.protocols import episodes_for as episodes_for
    from kvcore.evaluate.protocols import resolve_lmax as resolve_lmax
    from kvcore.history import series as series
    from kvcore.history.bucket_model import bucket_samples as bucket_samples
    from kvcore.history.bucket_model import DEFAULT_MODEL as DEFAULT_MODEL
    from kvcore.history.bucket_model import MODELS as MODELS
    from kvcore.history.bucket_model import Shape as Shape
    from kvcore.history.bucketed import class_histories as class_histories
    from kvcore.history.bucketed import ClassHistory as ClassHistory
    from kvcore.history.buckets import bin_lengths as bin_lengths
    from kvcore.history.buckets import Buckets as Buckets
    from kvcore.history.buckets import SKEW_FRACTION as SKEW_FRACTION
    from kvcore.history.buckets import SKEW_REQUESTS as SKEW_REQUESTS
    from kvcore.history.samples import BinningBound as BinningBound
    from kvcore.history.samples import History as History
    from kvcore.history.samples import Samples as Samples
    from kvcore.history.series import ENVOY_TOKEN_TYPE as ENVOY_TOKEN_TYPE
    from kvcore.history.series import ENVOY_TOKEN_USAGE as ENVOY_TOKEN_USAGE
    from kvcore.history.series import kvplan_buckets as kvplan_buckets
    from kvcore.history.series import KVPLAN_CLASS_LABEL as KVPLAN_CLASS_LABEL
    from kvcore.history.series import KVPLAN_OUTPUT_TOKENS as KVPLAN_OUTPUT_TOKENS
    from kvcore.history.series import LAYOUTS as LAYOUTS
    from kvcore.history.series import LLMD_OUTPUT_TOKENS as LLMD_OUTPUT_TOKENS
    from kvcore.history.series import vllm_buckets as vllm_buckets
    from kvcore.history.series import VLLM_CACHE_CONFIG_INFO as VLLM_CACHE_CONFIG_INFO
    from kvcore.history.series import VLLM_GENERATION_TOKENS as VLLM_GENERATION_TOKENS
    from kvcore.history.series import VLLM_GENERATION_TOKENS_ESCAPED as VLLM_GENERATION_TOKENS_ESCAPED
    from kvcore.history.series import VLLM_KV_CACHE_USAGE as VLLM_KV_CACHE_USAGE
    from kvcore.history.series import VLLM_PREEMPTIONS as VLLM_PREEMPTIONS
    from kvcore.history.traces import build_1_2_5_buckets as build_1_2_5_buckets
    from kvcore.history.traces import load_trace as load_trace
    from kvcore.history.traces import Trace as Trace
    from kvcore.planner import plan as plan
    from kvcore.planner.exact import exact_bounds as exact_bounds
    from kvcore.planner.exact import solve_exact as solve_exact
    from kvcore.planner.instance import ClassSpec as ClassSpec
    from kvcore.planner.instance import CostSpec as CostSpec
    from kvcore.planner.instance import GroupSpec as GroupSpec
    from kvcore.planner.instance import input_error as input_error
    from kvcore.planner.instance import Instance as Instance
    from kvcore.planner.instance import Layout as Layout
    from kvcore.planner.planmodel import ClassPlan as ClassPlan
    from kvcore.planner.planmodel import GroupPlan as GroupPlan
    from kvcore.planner.planmodel import ObjectiveTerms as ObjectiveTerms
    from kvcore.planner.planmodel import Plan as Plan
    from kvcore.planner.planmodel import PlanStatus as PlanStatus
    from kvcore.planner.slo import cost_ratio as cost_ratio
    from kvcore.planner.slo import SloSpec as SloSpec
    from kvcore.planner.synthetic import generate as generate_instance
    from kvcore.planner.synthetic_fleet import generate_fleet as generate_fleet
    from kvcore.profiles import ProfileOverride as ProfileOverride
    from kvcore.profiles.gpus import CATALOGUE as GPU_CATALOGUE
    from kvcore.profiles import resolve as resolve_profile
    from kvcore.profiles import roofline as roofline
    from kvcore.reservation import ReservationResult as ReservationResult
    from kvcore.reservation import reserve as reserve
    from kvcore.reservation.exact import solve_dro_exact as solve_dro_exact
    from kvcore.reservation.lp import solve_dro_lp as solve_dro_lp
    from kvcore.reservation.radius import DEFAULT_RADIUS as DEFAULT_RADIUS
    from kvcore.reservation.radius import RadiusChoice as RadiusChoice
    from kvcore.reservation.radius import RadiusPolicy as RadiusPolicy
    from kvcore.reservation.radius import with_horizon as with_horizon
    from kvcore.reservation.radius_drift import drift_radius as drift_radius
    from kvcore.reservation.radius_drift import exposed_side as exposed_side
    from kvcore.reservation.radius_drift import Side as Side
    from kvcore.reservation.radius_drift import wasserstein1_side as wasserstein1_side
    from kvcore.reservation_file import NO_RESERVATIONS as NO_RESERVATIONS
    from kvcore.reservation_file import parse_reservations as parse_reservations
    from kvcore.reservation_file import PromptLengthRule as PromptLengthRule
    from kvcore.reservation_file import render_reservations as render_reservations
    from kvcore.reservation_file import Reservations as Reservations
    from kvcore.reservation_file import ReservationsError as ReservationsError
    from kvcore.rules.classes import KnobClass as KnobClass
    from kvcore.rules.knobs import choose_knobs as choose_knobs
    from kvcore.rules.knobs import knobs_for_plan as knobs_for_plan
    from kvcore.rules.knobs import plan_groups as plan_groups
    from kvcore.rules.knobs import WATERMARK_MIN_VERSION as WATERMARK_MIN_VERSION
    from kvcore.rules.replay_set import ReplaySet as ReplaySet
    from kvcore.rules.replays import GroupReplays as GroupReplays
    from kvcore.rules.replays import ReplayStore as ReplayStore
    from kvcore.rules.reserve import choose_reserves as choose_reserves
    from kvcore.rules.reserve import class_rho as class_rho
    from kvcore.rules.reserve import engine_rho as engine_rho
    from kvcore.rules.reserve import ReserveChoice as ReserveChoice
    from kvcore.rules.reserve import reserves_for_plan as reserves_for_plan
    from kvcore.sim import gate as gate
    from kvcore.sim import resample_trace as resample_trace
    from kvcore.sim import SimGroup as SimGroup
    from kvcore.sim import SimPolicy as SimPolicy
    from kvcore.sim import Workload as Workload
    from kvcore.sim.engine import EngineConfig as EngineConfig
    from kvcore.sim.engine import GroupEngine as GroupEngine
    from kvcore.sim.engine import meets_slo as meets_slo
    from kvcore.sim.engine import Jobs as Jobs
    from kvcore.sim.engine import run_fast as run_fast
    from kvcore.sim.engine import run_reference as run_reference
    from kvcore.sim.engine import simulate_engine as simulate_engine
    from kvcore.sim.engine import StepTiming as StepTiming
    from kvcore.sim.gate import capped_reserve as capped_reserve


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
