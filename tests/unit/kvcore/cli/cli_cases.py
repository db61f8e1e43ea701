"""The case table of the CLI bad-input campaign, part 1: what every case is, the bad files, and the cases of
``kvcore reserve``, ``kvcore evaluate``, ``kvcore bench scale`` and ``kvplan-dev`` (``kvcore plan``'s are in
``cli_cases_plan.py``). Used by ``test_cli_bad_input.py``.

A :class:`Case` is an argv whose words ``@name`` are replaced by the path of the case's file ``name`` (written into
a fresh directory for the case), the program, and the field its one error line must name first:
``<prog>: error: <field>...`` (``@name`` in the field is replaced the same way).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FileMaker = Callable[[Path], None]
"""Writes one file (or directory) at the given path."""


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    field: str
    files: Mapping[str, bytes | FileMaker] = field(default_factory=dict)
    program: str = "kvcore"
    reported_by: str = ""
    """Who reports the error when not the (sub-)command typed, e.g. ``kvcore`` for an unknown command."""

    @property
    def prog(self) -> str:
        """What the error line starts with: the program and its (sub-)command."""
        if self.reported_by:
            return self.reported_by
        words = [w for w in self.argv[:2] if not w.startswith("-")]
        if self.program == "kvplan-dev":
            return " ".join(["kvplan-dev", *words[:2 if words[:1] == ["cluster"] else 1]])
        return " ".join(["kvcore", *words[:2 if words[:1] == ["bench"] else 1]])


HEADER = b"arrival_s,input_tokens,output_tokens\n"
GOOD_TRACE = HEADER + b"0.0,100,50\n1.5,200,120\n3.0,150,80\n4.5,120,300\n"


def _directory(path: Path) -> None:
    path.mkdir()


def _many_lines_then_bad(path: Path) -> None:
    """A trace of a million good lines and a bad last one (line 1,000,002)."""
    with path.open("wb") as handle:
        handle.write(HEADER)
        handle.writelines(b"%d.0,100,50\n" % i for i in range(1_000_000))
        handle.write(b"1000000.0,100,oops\n")


def _long_line(path: Path) -> None:
    path.write_bytes(HEADER + b"0," * 1_100_000)


def _huge_header(path: Path) -> None:
    path.write_bytes(b"x" * 500_000 + b"\n1,2\n")


def _fifo(path: Path) -> None:
    """A FIFO with no writer: opening it for reading blocks forever unless the reader refuses it."""
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _dev_urandom(path: Path) -> None:
    path.symlink_to("/dev/urandom")


def _socket(path: Path) -> None:
    """A Unix socket file (bound, then closed: the file stays)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))


def _dangling(path: Path) -> None:
    path.symlink_to("nowhere.csv")


NOT_FILES: list[tuple[str, FileMaker, str]] = [
    ("fifo", _fifo, "not a regular file (a FIFO)"),
    ("dev-zero", _dev_zero, "not a regular file (a character device)"),
    ("dev-urandom", _dev_urandom, "not a regular file (a character device)"),
    ("socket", _socket, "not a regular file"),
]
"""Paths that exist but are not regular files (issue 26: a FIFO hung the CLI), with what the message says."""


# (id, content, the field named). Every one is a bad trace or lengths file for any loader.
BAD_FILES: list[tuple[str, bytes | FileMaker, str]] = [
    ("empty", b"", "f.csv"),
    ("blank-lines", b"\n\n\n", "f.csv"),
    ("spaces", b"   \n \t \n", "f.csv"),
    ("header-only", HEADER, "f.csv"),
    ("latin1", HEADER + b"0,10,5\xe9\n", "f.csv line 2"),
    ("latin1-header", b"arr\xefval_s,input_tokens,output_tokens\n0,1,2\n", "f.csv line 1"),
    ("utf16", "arrival_s,input_tokens,output_tokens\n0,1,2\n".encode("utf-16"), "f.csv line 1"),
    ("binary-random", bytes(range(256)) * 64, "f.csv line 1"),
    ("png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "f.csv line"),
    ("gzip", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(200)), "f.csv line 1"),
    ("nul-in-row", HEADER + b"0,10,5\n1,1\x00,2\n", "f.csv line 3"),
    ("long-line", _long_line, "f.csv line 2"),
    ("huge-header", _huge_header, "f.csv line 1"),
    ("wrong-columns", b"a,b,c\n1,2,3\n", "f.csv line 1"),
    ("short-row", HEADER + b"0,10,5\n1,10\n", "f.csv line 3"),
    ("text-length", HEADER + b"0,10,five\n", "f.csv line 2"),
    ("nan-length", HEADER + b"0,10,nan\n", "f.csv line 2"),
    ("inf-length", HEADER + b"0,10,inf\n", "f.csv line 2"),
    ("negative-length", HEADER + b"0,10,-5\n", "f.csv line 2"),
    ("1e308-length", HEADER + b"0,10,1e308\n", "f.csv line 2"),
    ("1e999-length", HEADER + b"0,10,1e999\n", "f.csv line 2"),
    ("huge-digits", HEADER + b"0,10," + b"9" * 400 + b"\n", "f.csv line 2"),
    ("unclosed-quote", HEADER + b'0,10,"5\n1,10,6\n', "f.csv line"),
    ("million-lines-bad-last", _many_lines_then_bad, "f.csv line 1000002"),
    ("directory", _directory, "f.csv"),
    *[(name, maker, "f.csv") for name, maker, _ in NOT_FILES],
    # CSV quirks (issue 26: a row longer than its header and a duplicated header were accepted silently)
    ("long-row", HEADER + b"0,10,5\n1,10,6,7\n", "f.csv line 3"),
    ("trailing-delimiter", HEADER + b"0,10,5,\n", "f.csv line 2"),
    ("duplicate-header", b"arrival_s,input_tokens,output_tokens,output_tokens\n0,1,5,9\n", "f.csv line 1"),
    ("duplicate-unused-header", b"x,x,arrival_s,input_tokens,output_tokens\n1,2,0,1,5\n", "f.csv line 1"),
    ("quoted-newline-in-field", HEADER + b'0,10,"5\n6"\n', "f.csv line"),
    ("lone-cr-rows", b"arrival_s,input_tokens,output_tokens\r0,10,5\r1,10,six\r", "f.csv line 3"),
]

# Bad traces only load_trace sees (arrival times).
BAD_TRACES: list[tuple[str, bytes | FileMaker, str]] = [
    ("nan-arrival", HEADER + b"nan,10,5\n", "f.csv line 2 arrival_s"),
    ("negative-arrival", HEADER + b"-1,10,5\n", "f.csv line 2 arrival_s"),
    ("1e308-arrival", HEADER + b"0,10,5\n1e308,10,5\n", "f.csv line 3 arrival_s"),
    ("text-arrival", HEADER + b"noon,10,5\n", "f.csv line 2 arrival_s"),
    ("backwards", HEADER + b"0,10,5\n5,10,5\n4,10,5\n", "f.csv line 4 arrival_s"),
    ("mixed-timestamps", HEADER + b"0,10,5\n,10,5\n", "f.csv line 3 arrival_s"),
    ("nan-input", HEADER + b"0,nan,5\n", "f.csv line 2 input_tokens"),
    ("1e308-input", HEADER + b"0,1e308,5\n", "f.csv line 2 input_tokens"),
    ("no-output-column", b"arrival_s,input_tokens\n0,1\n", "f.csv line 1"),
]

NUMBERS = [("1e308", "1e308"), ("inf", "inf"), ("minus-inf", "-inf"), ("nan", "nan"), ("negative", "-1"),
           ("text", "abc"), ("empty", ""), ("1e999", "1e999"), ("5000-digits", "9" * 5000),
           ("hex", "0x10"), ("spaces", " "), ("minus-zero-nan", "-nan")]
"""Bad values for every numeric flag (``-inf`` reads as an option to argparse: still a one-line error)."""

RESERVE = ("reserve", "--samples", "@ok.csv", "--cp", "10", "--cw", "1", "--lmax", "5000")


def _with(base: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """``base`` with ``flag`` set to ``value`` (replaced when present, else appended)."""
    argv = list(base)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return tuple(argv)
    return (*argv, flag, value)


def reserve_cases() -> list[Case]:
    ok = {"ok.csv": GOOD_TRACE}
    cases = [Case(f"reserve-{flag[2:]}-{name}", _with(RESERVE, flag, value), flag, ok)
             for flag in ("--cp", "--cw", "--lmax", "--eps", "--eps-frac", "--horizon-ratio")
             for name, value in NUMBERS]
    cases += [Case(f"reserve-file-{name}", _with(RESERVE, "--samples", "@f.csv"), where, {"f.csv": content})
              for name, content, where in BAD_FILES]
    cases += [Case(f"reserve-lengths-{name}", _with(RESERVE, "--samples", "@f.csv"), where, {"f.csv": content})
              for name, content, where in (("two-fields", b"5\n6,7\n", "f.csv line 2"),
                                           ("header-then-two-fields", b"tokens\n5\n6,7\n", "f.csv line 3"))]
    weights = {"w.csv": b"output_tokens,w\n5,1\n7,2\n"}
    cases += [
        Case("reserve-costs-both-zero", _with(_with(RESERVE, "--cp", "0"), "--cw", "0"), "--cp", ok),
        Case("reserve-lmax-below-sample", _with(RESERVE, "--lmax", "100"), "--lmax", ok),
        Case("reserve-missing-file", _with(RESERVE, "--samples", "@nope.csv"), "@nope.csv", ok),
        Case("reserve-column-missing", (*RESERVE, "--column", "nope"), "ok.csv line 1", ok),
        Case("reserve-weight-column-missing", (*_with(RESERVE, "--samples", "@w.csv"), "--weight-column", "nope"),
             "w.csv line 1", weights),
        *[Case(f"reserve-weight-{name}", (*_with(RESERVE, "--samples", "@w.csv"), "--weight-column", "w"), where,
               {"w.csv": b"output_tokens,w\n5,1\n7," + bad + b"\n"})
          for name, bad, where in (("nan", b"nan", "w.csv line 3 w"), ("negative", b"-2", "w.csv line 3 w"),
                                   ("1e308", b"1e308", "w.csv line 3 w"), ("text", b"heavy", "w.csv line 3 w"),
                                   ("inf", b"inf", "w.csv line 3 w"))],
        Case("reserve-weight-all-zero", (*_with(RESERVE, "--samples", "@w.csv"), "--weight-column", "w"),
             "output_tokens.weights", {"w.csv": b"output_tokens,w\n5,0\n7,0\n"}),
        Case("reserve-unknown-flag", (*RESERVE, "--frobnicate"), "--frobnicate", ok),
        Case("reserve-no-samples-flag", ("reserve", "--cp", "1", "--cw", "1", "--lmax", "9"), "--samples"),
        Case("reserve-no-arguments", ("reserve",), "--samples"),
        Case("reserve-bad-method", (*RESERVE, "--method", "p50"), "--method", ok),
        Case("reserve-two-radius-flags", (*RESERVE, "--eps", "1", "--eps-frac", "0.1"), "--eps-frac", ok),
    ]
    return cases


EVALUATE = ("evaluate", "--trace", "@t.csv", "--no-progress", "--rho", "10", "--shift", "1", "--method", "saa")
LIST_VALUES = [("1e308", "1e308"), ("inf", "inf"), ("nan", "nan"), ("negative", "-1"), ("zero", "0"),
               ("text", "abc"), ("empty", ""), ("hole", "1,,2"), ("above-bound", "1e7")]


def evaluate_cases() -> list[Case]:
    ok = {"t.csv": GOOD_TRACE}
    cases = [Case(f"evaluate-{flag[2:]}-{name}", _with(EVALUATE, flag, value), flag, ok)
             for flag in ("--rho", "--shift") for name, value in LIST_VALUES]
    cases += [Case(f"evaluate-lmax-{name}", (*EVALUATE, "--lmax", value), where, ok)
              for name, value, where in (("1e308", "1e308", "--lmax"), ("inf", "inf", "lmax"), ("nan", "nan", "lmax"),
                                         ("negative", "-1", "lmax"), ("text", "abc", "--lmax"),
                                         ("below-trace", "10", "lmax"))]
    cases += [Case(f"evaluate-seed-{name}", (*EVALUATE, "--seed", value), "--seed", ok)
              for name, value in (("negative", "-1"), ("text", "abc"), ("float", "1.5"), ("huge", "9" * 30),
                                  ("empty", ""))]
    cases += [Case(f"evaluate-{flag[2:]}-n-{name}", (*EVALUATE, flag, value), flag, ok)
              for flag in ("--seed", "--replay-requests") for name, value in NUMBERS]
    engine = ("evaluate", "--trace", "@t.csv", "--no-progress", "--engine", "vllm")
    cases += [Case(f"evaluate-engine-{flag[2:]}-{name}", (*engine, flag, value), flag, ok)
              for flag in ("--load", "--rho") for name, value in LIST_VALUES]
    cases += [Case(f"evaluate-out-{name}", (*EVALUATE, "--out", "@o"), "--out", {**ok, "o": maker})
              for name, maker, _ in NOT_FILES]
    cases += [Case(f"evaluate-trace-{name}", _with(EVALUATE, "--trace", "@f.csv"), where, {"f.csv": content})
              for name, content, where in BAD_FILES + BAD_TRACES]
    no_time = {"n.csv": HEADER + b",10,5\n,20,7\n"}
    same_time = {"s.csv": HEADER + b"5,10,5\n5,20,7\n"}
    cases += [
        Case("evaluate-one-request", _with(EVALUATE, "--trace", "@o.csv"), "o.csv", {"o.csv": HEADER + b"0,10,5\n"}),
        Case("evaluate-rolling-no-timestamps", (*_with(EVALUATE, "--trace", "@n.csv"), "--protocol", "rolling"),
             "n.csv", no_time),
        Case("evaluate-rolling-one-instant", (*_with(EVALUATE, "--trace", "@s.csv"), "--protocol", "rolling"),
             "s.csv arrival_s", same_time),
        Case("evaluate-bad-protocol", (*EVALUATE, "--protocol", "sideways"), "--protocol", ok),
        Case("evaluate-bad-method", _with(EVALUATE, "--method", "p50"), "method", ok),
        Case("evaluate-empty-method", _with(EVALUATE, "--method", ","), "--method", ok),
        Case("evaluate-out-is-a-file", (*EVALUATE, "--out", "@t.csv"), "--out", ok),
        Case("evaluate-missing-trace", _with(EVALUATE, "--trace", "@nope.csv"), "@nope.csv"),
        Case("evaluate-no-trace-flag", ("evaluate",), "--trace"),
        Case("evaluate-unknown-flag", (*EVALUATE, "--fast"), "--fast", ok),
    ]
    return cases


def bench_cases() -> list[Case]:
    sizes = [("short", "3x4"), ("zero-classes", "0x4x100"), ("zero-samples", "3x4x0"), ("zero-configs", "3x0x10"),
             ("too-many-configs", "3x13x100"), ("letters", "axbxc"), ("float", "1e3x4x10"),
             ("negative", "-3x4x10"), ("empty", ""), ("digits-400", "9" * 400 + "x4x10"),
             ("10000-classes", "10000x4x100"), ("samples-past-limit", "2x4x99999999"), ("spaces", "3 x 4 x 10")]
    cases = [Case(f"bench-size-{name}", ("bench", "scale", "--size", value), "--size") for name, value in sizes]
    cases += [Case(f"bench-seed-{name}", ("bench", "scale", "--size", "2x2x10", "--seed", value), "--seed")
              for name, value in (("negative", "-1"), ("text", "x"), ("float", "0.5"), ("huge", "9" * 25))]
    cases += [Case(f"bench-exact-timeout-{name}", ("bench", "scale", "--size", "2x2x10", "--exact", "--exact-timeout",
                                                    value), "--exact-timeout")
              for name, value in (("nan", "nan"), ("inf", "inf"), ("negative", "-1"), ("zero", "0"), ("1e308", "1e308"),
                                  ("text", "soon"))]
    cases += [Case(f"bench-{flag[2:]}-n-{name}", ("bench", "scale", "--size", "2x2x10", "--exact", flag, value), flag)
              for flag in ("--seed", "--exact-timeout") for name, value in NUMBERS]
    cases += [Case("bench-no-subcommand", ("bench",), "{scale,fleet}"),
              Case("bench-unknown-subcommand", ("bench", "fly"), "{scale,fleet}", reported_by="kvcore bench"),
              Case("bench-no-size", ("bench", "scale"), "--size")]
    fleet = {"--classes": "4", "--groups": "2", "--configs": "3", "--samples": "10"}
    bad = [("classes-zero", "--classes", "0", "--classes"), ("groups-negative", "--groups", "-1", "--groups"),
           ("configs-13", "--configs", "13", "--configs"), ("samples-zero", "--samples", "0", "--samples"),
           ("load-zero", "--load", "0", "--load"), ("c-slo-negative", "--c-slo", "-1", "--c-slo"),
           ("classes-text", "--classes", "many", "--classes"), ("method", "--method", "fast", "--method"),
           ("classes-past-limit", "--classes", "2000", "--classes"), ("groups-past-limit", "--groups", "1000",
                                                                       "--groups"),
           ("samples-past-limit", "--samples", "9999999", "--samples")]
    for name, flag, value, where in bad:
        argv = {**fleet, flag: value}
        cases.append(Case(f"bench-fleet-{name}", ("bench", "fleet", *[t for kv in argv.items() for t in kv]), where))
    for flag in ("--classes", "--groups", "--configs", "--samples", "--seed", "--load", "--c-slo"):
        for name, value in NUMBERS + [("zero", "0"), ("float", "1.5")]:
            if (flag, name) in {("--seed", "zero"), ("--c-slo", "zero"), ("--c-slo", "float"), ("--load", "float")}:
                continue  # valid values
            argv = {**fleet, flag: value}
            cases.append(Case(f"bench-fleet-{flag[2:]}-n-{name}",
                              ("bench", "fleet", *[t for kv in argv.items() for t in kv]), flag))
    cases.append(Case("bench-fleet-no-classes", ("bench", "fleet", "--groups", "2", "--configs", "3", "--samples",
                                                 "10"), "--classes"))
    return cases


def dev_cases() -> list[Case]:
    up = ("cluster", "up", "--backfill", "@f.csv")
    cases = [Case(f"dev-backfill-{name}", up, "--backfill", {"f.csv": content}, program="kvplan-dev")
             for name, content, _ in BAD_FILES + BAD_TRACES]
    cases += [Case("dev-backfill-no-timestamps", up, "--backfill", {"f.csv": HEADER + b",10,5\n"}, "kvplan-dev"),
              Case("dev-backfill-missing", up, "--backfill", {}, "kvplan-dev")]
    cases += [Case(f"dev-hours-{name}", ("cluster", "up", "--hours", value), "--hours", program="kvplan-dev")
              for name, value in NUMBERS + [("zero", "0"), ("a-century", "876600")]]
    cases += [Case(f"dev-model-name-{name}", ("cluster", "up", "--model-name", value), "--model-name",
                   program="kvplan-dev") for name, value in (("empty", ""), ("newline", "a\nb"), ("long", "m" * 300))]
    cases += [Case(f"dev-demo-timeout-{name}", ("demo", "--timeout", value), "--timeout", program="kvplan-dev")
              for name, value in (("nan", "nan"), ("negative", "-5"), ("inf", "inf"), ("text", "later"),
                                  ("a-year", "31536000"))]
    cases += [Case(f"dev-demo-keep-logs-{name}", ("demo", "--keep-logs", "@k"), "--keep-logs", {"k": maker},
                   "kvplan-dev") for name, maker, _ in NOT_FILES]
    cases += [Case("dev-demo-keep-logs-is-a-file", ("demo", "--keep-logs", "@f.csv"), "--keep-logs",
                   {"f.csv": GOOD_TRACE}, "kvplan-dev"),
              Case("dev-unknown-flag", ("cluster", "up", "--turbo"), "--turbo", program="kvplan-dev"),
              Case("dev-no-action", ("cluster",), "action", program="kvplan-dev"),
              Case("dev-unknown-command", ("launch",), "command", program="kvplan-dev", reported_by="kvplan-dev"),
              Case("kvcore-unknown-command", ("launch",), "command", reported_by="kvcore")]
    return cases
