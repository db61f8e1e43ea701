"""The shared world of ``test_op_sources.py`` and the tests that reuse it: history sources (operator/observe/sources/): each source's one range query (metric spellings, class label, default."""

from __future__ import annotations

import copy
import pytest
from kvplan_operator import conditions as C
from kvplan_operator.prom import PromError
from kvcore import catalogue
from kvcore.history.series import SOURCE_LAYOUTS
from kvplan_operator.observe.sources import observe_histories, plan_queries, registry
from kvplan_operator.spec import InvalidSpec, parse_spec
from op_history_world import MATRIX, T, RecordedProm  # type: ignore[import-not-found]


NOW = float(T[2])


GROUPS = [
    {"name": "interactive", "deployment": "vllm-llama70b-interactive", "model": "llama-70b",
     "nodePool": {"gpuCount": 16}, "layouts": [{"tp": 4}, {"tp": 8}]},
    {"name": "batch", "deployment": "vllm.llama70b.batch", "model": "llama-70b", "nodePool": {"gpuCount": 8},
     "layouts": [{"tp": 8}]},
]


def cls(name: str, history: dict, **kw: object) -> dict:
    return {"name": name, "inputTokens": 500, "maxOutputTokens": 2048, "history": history,
            "costs": {"preemption": 10, "waste": 1}, **kw}


def spec(classes: list, sources: list | None = None, groups: list | None = None) -> dict:
    return {"groups": copy.deepcopy(groups or GROUPS), "classes": classes,
            "prometheus": {"url": "http://prom:9090", "lookback": "3h", "windows": 3},
            "historySources": sources or []}


STOCK = spec([cls("interactive", {"group": "interactive"}), cls("batch", {"group": "batch"})])
