"""The case table of the CLI bad-input campaign, part 2: ``kvcore plan INSTANCE.yaml``.

:data:`BASE` is a valid instance that touches every input kind (inline values with weights, cumulative buckets,
a trace file, an SLO, a radius policy, a profile override); ``test_cli_bad_input.py`` checks that it plans (exit 0),
so each case fails because of its one change:

* every numeric field set to 1e308, inf, NaN, -1, a 400-digit integer, a string, a list and a mapping;
* YAML that is not an instance: empty, not UTF-8, binary, a billion laughs, 1,000 levels deep, recursive, Python
  tags, too big;
* structure: missing, empty, mistyped and unknown keys at every level, duplicates, unknown names, bad trace files;
* sizes the planner refuses up front: 10,000 classes, 1,000 groups, 100 layouts, a work estimate past the limit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cli_cases import BAD_FILES, GOOD_TRACE, NOT_FILES, NUMBERS, Case

BASE: dict[str, Any] = {
    "costs": {"kappa": 0.2, "c_slo": 5.0, "c_rej": 5000.0, "max_utilisation": 0.95},
    "groups": [{"name": "g", "gpu_type": "A100-80GB", "gpus": 8, "gpus_per_node": 8, "model": "llama-8b",
                "layouts": [[1, 1], [2, 1]]}],
    "classes": [
        {"name": "chat", "arrival_rate": 1.0, "input_tokens": 100, "prefix_tokens": 10, "lmax": 1000, "cp": 10,
         "cw": 1, "radius": {"kind": "drift", "horizon_ratio": 1.0},
         "samples": {"values": [10, 20, 30], "weights": [1, 1, 2]}},
        {"name": "code", "arrival_rate": 0.5, "input_tokens": 200, "lmax": 2000,
         "slo": {"mu": 3.0, "sigma": 0.5, "lam": 100},
         "samples": {"buckets": {"le": [10, 100, "+Inf"], "count": [5, 9, 10]}}},
        {"name": "batch", "arrival_rate": 0.2, "input_tokens": 50, "lmax": 500, "cp": 2, "cw": 1,
         "samples": {"trace": "ok.csv", "limit": 3}},
    ],
    "profiles": [{"gpu_type": "A100-80GB", "model": "llama-8b", "tp": 1, "pp": 1, "kv_capacity_tokens": 400000,
                  "throughput_tokens_s": 2400, "step_t0_s": 0.01, "step_t1_s": 0.0001, "phi": 1}],
}

VALUES: list[tuple[str, Any]] = [("1e308", 1e308), ("inf", float("inf")), ("nan", float("nan")), ("negative", -1),
                                 ("400-digits", 10**400), ("text", "abc"), ("list", [1]), ("mapping", {"a": 1})]

# (path to a numeric field, the field its error names first, values that are legitimately fine there)
FIELDS: list[tuple[tuple[Any, ...], str, tuple[str, ...]]] = [
    *[(("costs", k), f"costs.{k}", ()) for k in ("kappa", "c_slo", "c_rej", "max_utilisation")],
    *[(("groups", 0, k), f"groups[0].{k}", ()) for k in ("gpus", "gpus_per_node")],
    (("groups", 0, "layouts", 0, 0), "groups[0].layouts[0]", ()),
    (("groups", 0, "layouts", 0, 1), "groups[0].layouts[0]", ()),
    *[(("classes", 0, k), f"classes[0].{k}", ()) for k in ("arrival_rate", "input_tokens", "prefix_tokens", "lmax",
                                                           "cp", "cw")],
    (("classes", 0, "samples", "values", 0), "classes[0].samples.values", ()),
    (("classes", 0, "samples", "weights", 0), "classes[0].samples.values.weights", ()),
    *[(("classes", 0, "radius", k), f"classes[0].radius.{k}", ()) for k in (
        "eps", "frac", "floor_scale", "drift_z", "horizon_ratio", "horizon_frac", "horizon_power")],
    *[(("classes", 1, "slo", k), "classes[1].slo", ()) for k in ("mu", "sigma", "lam")],
    (("classes", 1, "samples", "buckets", "le", 1), "classes[1].samples.buckets", ("1e308", "inf")),
    (("classes", 1, "samples", "buckets", "count", 1), "classes[1].samples.buckets", ()),
    (("classes", 2, "samples", "limit"), "classes[2].samples.limit", ("400-digits",)),
    *[(("profiles", 0, k), f"profiles[0].{k}", ()) for k in (
        "kv_capacity_tokens", "throughput_tokens_s", "step_t0_s", "step_t1_s", "phi", "tp", "pp")],
]


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _drop(data: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def _yaml(data: Any) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


HUGE_INTS: list[tuple[str, bytes]] = [
    ("5000-digits", b"9" * 5000), ("negative-5000-digits", b"-" + b"9" * 5000),
    ("underscores", b"1" + b"_000" * 2000), ("hex-50000", b"0x" + b"f" * 50_000),
    ("tagged-quoted", b'!!int "' + b"9" * 5000 + b'"'), ("sexagesimal", b"1" + b":59" * 3000),
    ("binary", b"0b" + b"1" * 20_000),
]
"""YAML 1.1 integers too long to build or print, as they appear in a file."""


def _with_raw(data: dict[str, Any], path: tuple[Any, ...], raw: bytes) -> bytes:
    """The YAML of ``data`` with the value at ``path`` written as the raw text ``raw`` (PyYAML cannot dump it)."""
    return _yaml(_set(data, path, "RAW-VALUE-HERE")).replace(b"RAW-VALUE-HERE", raw)


def _merge_bomb() -> bytes:
    """Merge keys (``<<: *a``) of merge keys: each level doubles the mapping."""
    lines = ["a0: &a0 {x0: 1, y0: 2}"]
    lines += [f"a{i}: &a{i} {{<<: [*a{i - 1}], b{i}: *a{i - 1}, c{i}: *a{i - 1}}}" for i in range(1, 30)]
    lines += ["classes: *a29", "groups: []"]
    return ("\n".join(lines) + "\n").encode()


def _plan(name: str, data: Any, field: str, extra: tuple[str, ...] = (),
          files: dict[str, bytes | Callable[[Path], None]] | None = None) -> Case:
    content = data if isinstance(data, bytes) or callable(data) else _yaml(data)
    return Case(f"plan-{name}", ("plan", "@i.yaml", *extra), field,
                {"i.yaml": content, "ok.csv": GOOD_TRACE, **(files or {})})


def base_case() -> Case:
    """The valid instance itself (not a campaign case: the control that makes every mutation meaningful)."""
    return _plan("base", BASE, "")


def _nested(depth: int, open_: str, close: str) -> bytes:
    return ("classes: " + open_ * depth + "1" + close * depth + "\n").encode()


def _billion_laughs() -> bytes:
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    lines += ["classes: *a9", "groups: []"]
    return ("\n".join(lines) + "\n").encode()


def _big_file(path: Path) -> None:
    with path.open("wb") as handle:
        handle.write(b"# padding\n" * (34 * 1024**2 // 10))
        handle.write(_yaml(BASE))


def _classes(n: int, groups: int = 1, *, trace: str = "missing.csv") -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    out["classes"] = [{"name": f"c{i}", "arrival_rate": 0.1, "input_tokens": 10, "lmax": 100, "cp": 2, "cw": 1,
                       "samples": {"trace": trace} if trace else {"values": [5, 6]}} for i in range(n)]
    out["groups"] = [{**BASE["groups"][0], "name": f"g{k}"} for k in range(groups)]
    return out


def _file_maker(content: bytes | Callable[[Path], None]) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)
    return make


def plan_cases() -> list[Case]:
    cases = [_plan(f"{'.'.join(map(str, path))}={name}", _set(BASE, path, value), field)
             for path, field, fine in FIELDS for name, value in VALUES if name not in fine]
    cases += [_plan(f"horizon-ratio-{name}", BASE, "--horizon-ratio", ("--horizon-ratio", value))
              for name, value in NUMBERS]
    yaml_files: list[tuple[str, bytes | Callable[[Path], None], str]] = [
        ("empty", b"", "instance"), ("comments-only", b"# nothing here\n", "instance"),
        ("top-level-list", b"- 1\n- 2\n", "instance"), ("top-level-scalar", b"42\n", "instance"),
        ("latin1", b"classes:\n  - name: caf\xe9\n", "i.yaml line 2"),
        ("utf16", "classes: []\n".encode("utf-16"), "i.yaml line 1"),
        ("binary", bytes(range(256)) * 16, "i.yaml line 1"),
        ("billion-laughs", _billion_laughs(), "i.yaml line"),
        ("billion-laughs-in-lmax", _billion_laughs().replace(b"classes: *a9", b"classes: [{name: x, lmax: *a9}]"),
         "i.yaml line"),
        ("nested-lists-1000", _nested(1000, "[", "]"), "i.yaml line 1"),
        ("nested-maps-1000", _nested(1000, "{a: ", "}"), "i.yaml line 1"),
        ("nested-33", _nested(33, "[", "]"), "i.yaml line 1"),
        ("recursive-alias", b"classes: &c [1, *c]\n", "i.yaml line 1"),
        ("unclosed-bracket", b"classes: [1, 2\n", "i.yaml line"),
        ("tab-indent", b"classes:\n\t- 1\n", "i.yaml line 2"),
        ("python-tag", b"classes: !!python/object/apply:os.system ['true']\n", "i.yaml line 1"),
        ("two-documents", b"classes: []\n---\nclasses: []\n", "i.yaml line"),
        ("34-MiB", _big_file, "i.yaml"),
        ("directory", lambda p: p.mkdir(), "i.yaml"),
        *[(name, maker, "i.yaml") for name, maker, _ in NOT_FILES],
        ("merge-key-bomb", _merge_bomb(), "i.yaml line"),
        ("deep-flow-and-block", b"classes:\n" + b"".join(b"  " * i + b"- \n" for i in range(1, 40)) + b"  " * 40 + b"1\n",
         "i.yaml line"),
        ("int-5000-digits-key", b"9" * 5000 + b": 1\nclasses: []\n", "i.yaml line 1"),
    ]
    cases += [_plan(f"yaml-{name}", _file_maker(content), field) for name, content, field in yaml_files]
    # Integers Python will not convert (past 4,300 digits) or print, in every numeric field (issue 26: a traceback)
    cases += [_plan(f"{'.'.join(map(str, path))}=int-{name}", _with_raw(BASE, path, raw), "i.yaml line")
              for path, _, _ in FIELDS for name, raw in HUGE_INTS]
    cases.append(Case("plan-missing-file", ("plan", "@nope.yaml"), "@nope.yaml"))
    structure: list[tuple[str, Any, str]] = [
        ("no-classes", _drop(BASE, ("classes",)), "classes"),
        ("classes-not-list", _set(BASE, ("classes",), "chat"), "classes"),
        ("classes-empty", _set(BASE, ("classes",), []), "classes"),
        ("class-not-mapping", _set(BASE, ("classes", 0), "chat"), "classes[0]"),
        ("no-groups", _drop(BASE, ("groups",)), "groups"),
        ("groups-empty", _set(BASE, ("groups",), []), "groups"),
        ("groups-not-list", _set(BASE, ("groups",), "g"), "groups"),
        ("costs-not-mapping", _set(BASE, ("costs",), 3), "costs"),
        ("profiles-not-list", _set(BASE, ("profiles",), "fast"), "profiles"),
        ("unknown-top-key", _set(BASE, ("colour",), "blue"), "colour"),
        ("unknown-class-key", _set(BASE, ("classes", 0, "colour"), 1), "classes[0].colour"),
        ("unknown-group-key", _set(BASE, ("groups", 0, "colour"), 1), "groups[0].colour"),
        ("unknown-costs-key", _set(BASE, ("costs", "colour"), 1), "costs.colour"),
        ("unknown-radius-key", _set(BASE, ("classes", 0, "radius", "colour"), 1), "classes[0].radius.colour"),
        ("unknown-samples-key", _set(BASE, ("classes", 0, "samples", "colour"), 1), "classes[0].samples.colour"),
        ("unknown-profile-key", _set(BASE, ("profiles", 0, "colour"), 1), "profiles[0].colour"),
        ("samples-and-windows", _set(BASE, ("classes", 0, "windows"), [{"values": [1]}]), "classes[0].samples"),
        ("no-samples", _drop(BASE, ("classes", 0, "samples")), "classes[0].samples"),
        ("windows-empty", _set(_drop(BASE, ("classes", 0, "samples")), ("classes", 0, "windows"), []),
         "classes[0].windows"),
        ("windows-not-list", _set(_drop(BASE, ("classes", 0, "samples")), ("classes", 0, "windows"), "w"),
         "classes[0].windows"),
        ("two-sources", _set(BASE, ("classes", 0, "samples", "trace"), "ok.csv"), "classes[0].samples"),
        ("samples-a-list", _set(BASE, ("classes", 0, "samples"), [1, 2]), "classes[0].samples"),
        ("values-empty", _set(BASE, ("classes", 0, "samples"), {"values": []}), "classes[0].samples.values"),
        ("values-not-list", _set(BASE, ("classes", 0, "samples", "values"), "many"), "classes[0].samples.values"),
        ("weights-length", _set(BASE, ("classes", 0, "samples", "weights"), [1]), "classes[0].samples.values"),
        ("trace-missing", _set(BASE, ("classes", 2, "samples", "trace"), "nope.csv"), "classes[2].samples.trace"),
        ("trace-directory", _set(BASE, ("classes", 2, "samples", "trace"), "."), "classes[2].samples.trace"),
        ("trace-not-string", _set(BASE, ("classes", 2, "samples", "trace"), [1]), "classes[2].samples.trace"),
        ("trace-column-missing", _set(BASE, ("classes", 2, "samples", "column"), "nope"), "classes[2].samples"),
        ("trace-column-not-string", _set(BASE, ("classes", 2, "samples", "column"), [1]), "classes[2].samples"),
        ("duplicate-class", _set(BASE, ("classes", 1, "name"), "chat"), "classes[1].name"),
        ("duplicate-group", _set(BASE, ("groups",), BASE["groups"] * 2), "groups[1].name"),
        ("unknown-gpu", _set(BASE, ("groups", 0, "gpu_type"), "V100"), "groups[0].gpu_type"),
        ("unknown-model", _set(BASE, ("groups", 0, "model"), "gpt-9"), "groups[0].model"),
        ("unknown-profile-gpu", _set(BASE, ("profiles", 0, "gpu_type"), "H100"), "profiles[0].gpu_type"),
        ("radius-kind", _set(BASE, ("classes", 0, "radius", "kind"), "vibes"), "classes[0].radius.kind"),
        ("slo-and-cp", _set(BASE, ("classes", 1, "cp"), 3), "classes[1]"),
        ("no-costs-or-slo", _drop(_drop(BASE, ("classes", 0, "cp")), ("classes", 0, "cw")), "classes[0]"),
        ("prefix-above-input", _set(BASE, ("classes", 0, "prefix_tokens"), 500), "classes[0]"),
        ("sample-above-lmax", _set(BASE, ("classes", 0, "lmax"), 25), "classes[0].history"),
        ("layouts-not-list", _set(BASE, ("groups", 0, "layouts"), "all"), "groups[0].layouts"),
        ("layouts-empty", _set(BASE, ("groups", 0, "layouts"), []), "groups[0].layouts"),
        ("layout-triple", _set(BASE, ("groups", 0, "layouts", 0), [1, 1, 1]), "groups[0].layouts[0]"),
        ("name-empty", _set(BASE, ("classes", 0, "name"), ""), "classes[0].name"),
        ("name-not-string", _set(BASE, ("classes", 0, "name"), [1]), "classes[0].name"),
        ("buckets-not-mapping", _set(BASE, ("classes", 1, "samples", "buckets"), [1]), "classes[1].samples.buckets"),
        ("buckets-lengths", _set(BASE, ("classes", 1, "samples", "buckets", "count"), [1, 2]),
         "classes[1].samples.buckets"),
        ("10000-classes", _classes(10_000), "classes"),
        ("1000-groups", _classes(2, 1_000), "groups"),
        ("100-layouts", _set(BASE, ("groups", 0, "layouts"), [[1, p] for p in range(1, 101)]), "groups.layouts"),
    ]
    cases += [_plan(name, data, field) for name, data, field in structure]
    cases += [_plan(f"trace-file-{name}", _set(BASE, ("classes", 2, "samples", "trace"), "f.csv"),
                    "classes[2].samples.trace", files={"f.csv": content}) for name, content, _ in BAD_FILES]
    cases += [Case("plan-no-file-argument", ("plan",), "INSTANCE.yaml"),
              Case("plan-unknown-flag", ("plan", "@i.yaml", "--fast"), "--fast", {"i.yaml": _yaml(BASE)})]
    return cases
