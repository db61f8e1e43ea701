"""Read a planning instance from YAML (format: ``docs/instance-format.md``; example: ``examples/instance-70b.yaml``).

The YAML mirrors :class:`kvcore.planner.instance.Instance` except for the output-length samples, which a file names in one
of three ways under each class's ``samples`` key (or a list of them under ``windows``, oldest first):

* ``{trace: PATH, column: output_tokens, limit: N}`` — a trace CSV or a one-number-per-line file (``limit``: the
  first N values; PATH is relative to the YAML file);
* ``{values: [...], weights: [...]}`` — inline lengths (weights optional);
* ``{buckets: {le: [...], count: [...]}}`` — cumulative histogram buckets (Prometheus ``le``; ``+Inf`` allowed,
  capped at the class's ``lmax``).

Every error is an :class:`~kvcore.errors.InputError` naming the field (``classes[1].samples.trace``). The file is
read by :func:`kvcore.cli.yaml_guard.safe_yaml_load` (size, depth and alias expansion bounded), and a class or
group count past :mod:`kvcore.planner.limits` is refused before any trace is read.
"""

from __future__ import annotations

import json

import reprlib
from pathlib import Path
from typing import Any

from kvcore.bounds import MAX_TOKENS, MAX_WEIGHT
from kvcore.cli.yaml_guard import safe_yaml_load
from kvcore.errors import InputError
from kvcore.planner.instance import Instance, load_instance
from kvcore.planner.limits import check_counts
from kvcore.history.samples import History, Samples
from kvcore.history.traces import histogram_to_samples, load_lengths


def short(value: Any) -> str:
    """``repr(value)``, shortened: a value from a file can be as large as the file (an integer past Python's
    printing limit is described by its size)."""
    try:
        return reprlib.repr(value)
    except ValueError:
        return f"an integer of {value.bit_length():,} bits" if isinstance(value, int) else "(a value too large to show)"


def _prefixed(field: str, exc: InputError) -> InputError:
    return InputError(f"{field}.{exc.field}", exc.message, hint=exc.hint)


def samples_from_spec(spec: Any, *, field: str, base: Path, lmax: float) -> Samples:
    """One :class:`Samples` from a ``samples`` mapping (see the module docstring)."""
    if not isinstance(spec, dict):
        raise InputError(field, "must be a mapping with one of: trace, values, buckets")
    keys = [k for k in ("trace", "values", "buckets") if k in spec]
    if len(keys) != 1:
        raise InputError(field, "give exactly one of: trace, values, buckets")
    extra = set(spec) - {"trace", "column", "limit", "values", "weights", "buckets"}
    if extra:
        raise InputError(f"{field}.{sorted(extra)[0]}", "unknown key")
    try:
        if keys[0] == "trace":
            if not isinstance(spec["trace"], str) or not spec["trace"]:
                raise InputError(f"{field}.trace", f"must be a file name, got {short(spec['trace'])}")
            column = spec.get("column", "output_tokens")
            if not isinstance(column, str):
                raise InputError(f"{field}.column", f"must be a column name, got {short(column)}")
            path = Path(spec["trace"])
            path = path if path.is_absolute() else base / path
            if path.is_dir():
                raise InputError(f"{field}.trace", f"is a directory, not a file: {path}")
            if not path.exists():  # what exists but is not a regular file is refused by load_lengths
                raise InputError(f"{field}.trace", f"no such file: {path}")
            values = load_lengths(path, column)
            limit = spec.get("limit")
            if limit is not None:
                if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                    raise InputError(f"{field}.limit", f"must be a positive integer, got {short(limit)}")
                values = values[:limit]
            return Samples.from_arrays(values, field=f"{field}.trace")
        if keys[0] == "values":
            return Samples.from_arrays(spec["values"], spec.get("weights"), field=f"{field}.values")
        buckets = spec["buckets"]
        if not isinstance(buckets, dict) or "le" not in buckets or "count" not in buckets:
            raise InputError(f"{field}.buckets", "must be a mapping with lists 'le' and 'count'")
        le = _numbers(buckets["le"], f"{field}.buckets.le", strings=True)
        count = _numbers(buckets["count"], f"{field}.buckets.count", strings=False)
        return histogram_to_samples(le, count, max_model_len=lmax)
    except InputError as exc:
        if exc.field.startswith(field):
            raise
        raise _prefixed(f"{field}.{keys[0]}", exc) from None


def _numbers(value: Any, field: str, *, strings: bool) -> list[Any]:
    """A YAML list of numbers (or, with ``strings``, strings such as ``"+Inf"``), each within float64's range."""
    if not isinstance(value, list):
        raise InputError(field, f"must be a list, got {short(value)}")
    for i, item in enumerate(value):
        if isinstance(item, str) and strings:
            continue
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise InputError(f"{field}[{i}]", f"must be a number, got {short(item)}")
        if isinstance(item, int) and abs(item) > MAX_WEIGHT:
            raise InputError(f"{field}[{i}]", f"{short(item)} is too large (at most {MAX_WEIGHT:g})")
    return value


def instance_from_mapping(data: Any, *, base: Path) -> Instance:
    """Validate parsed YAML into an :class:`Instance`; relative paths are resolved against ``base``."""
    if not isinstance(data, dict):
        raise InputError("instance", "the file must hold a mapping with classes and groups")
    classes_in = data.get("classes")
    if not isinstance(classes_in, list):
        raise InputError("classes", "must be a list of classes" if classes_in is not None else "no classes")
    groups_in = data.get("groups")
    if isinstance(groups_in, list):  # refuse a size the planner cannot handle before reading any samples
        layouts = [len(g["layouts"]) for g in groups_in if isinstance(g, dict) and isinstance(g.get("layouts"), list)]
        check_counts(len(classes_in), len(groups_in), max(layouts, default=0))
    classes = []
    for i, raw in enumerate(classes_in):
        field = f"classes[{i}]"
        if not isinstance(raw, dict):
            raise InputError(field, "must be a mapping")
        c = dict(raw)
        lmax = c.get("lmax")
        if isinstance(lmax, bool) or not isinstance(lmax, (int, float)) or not 0 < lmax <= MAX_TOKENS:
            raise InputError(f"{field}.lmax", f"must be a number > 0 and <= {MAX_TOKENS:g}, got {short(lmax)}")
        if ("samples" in c) == ("windows" in c):
            raise InputError(f"{field}.samples", "give exactly one of samples or windows")
        if "samples" in c:
            windows = [samples_from_spec(c.pop("samples"), field=f"{field}.samples", base=base, lmax=float(lmax))]
        else:
            specs = c.pop("windows")
            if not isinstance(specs, list) or not specs:
                raise InputError(f"{field}.windows", "must be a non-empty list of samples mappings")
            windows = [samples_from_spec(s, field=f"{field}.windows[{j}]", base=base, lmax=float(lmax))
                       for j, s in enumerate(specs)]
        c["history"] = History.of(windows)
        classes.append(c)
    groups = data.get("groups")
    if isinstance(groups, list):
        groups = [_layouts(g, k) for k, g in enumerate(groups)]
    out = dict(data)
    out["classes"] = classes
    if isinstance(data.get("models"), dict):  # a model may be a path to its config.json, relative to the file
        out["models"] = {name: _config_json(cfg, field=f"models.{name}", base=base)
                         for name, cfg in data["models"].items()}
    if groups is not None:
        out["groups"] = groups
    return load_instance(out)


def _config_json(cfg: Any, *, field: str, base: Path) -> Any:
    if not isinstance(cfg, str):
        return cfg
    path = Path(cfg) if Path(cfg).is_absolute() else base / cfg
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(field, f"{cfg}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(field, f"{cfg}: not a readable config.json ({short(str(exc))})") from None


def _layouts(group: Any, k: int) -> Any:
    """Accept layouts as ``[tp, pp]`` pairs or ``{tp, pp}`` mappings."""
    if not isinstance(group, dict) or not isinstance(group.get("layouts"), list):
        return group
    g = dict(group)
    lays = []
    for j, lay in enumerate(g["layouts"]):
        if isinstance(lay, (list, tuple)):
            if len(lay) != 2:
                raise InputError(f"groups[{k}].layouts[{j}]", "a layout pair is [tp, pp]")
            lays.append({"tp": lay[0], "pp": lay[1]})
        else:
            lays.append(lay)
    g["layouts"] = lays
    return g


def load_instance_file(path: str | Path) -> Instance:
    """Read and validate an instance YAML file."""
    p = Path(path)
    return instance_from_mapping(safe_yaml_load(p), base=p.parent)
