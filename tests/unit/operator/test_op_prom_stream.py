"""The streaming reader of Prometheus answers (operator/prom/stream.py, issue 26 item 4), as a differential against
``json.loads``: on every document of a corpus (matrix, vector, scalar, string, error answers, extra members,
unicode, escapes, every whitespace, numbers split anywhere) and for every way the body can be cut into reads (one
byte, seven bytes, whole chunks), the streamed document equals ``json.loads``'s with each series' points as
numbers; malformed bodies are refused as not JSON, whatever the cut; and each bound is a named reason."""

from __future__ import annotations

import json

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.prom import PromError
from kvplan_operator.prom.stream import CHUNK, Malformed, Points, read_answer


def reader(body: bytes, size: int):
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        out = body[pos:pos + min(n, size)]
        pos += len(out)
        return out

    return read


def series(le: str, key: str, points: list) -> dict:
    return {"metric": {"le": le, "kvplan_class": key}, "values": points}


CORPUS = {
    "matrix": {"status": "success", "data": {"resultType": "matrix", "result": [
        series("10", "chat", [[1700000000, "1"], [1700003600.5, "2.5"]]),
        series("+Inf", "chat", [[1700000000, "NaN"], [1700003600.5, "+Inf"]])]}},
    "matrix-empty": {"status": "success", "data": {"resultType": "matrix", "result": []}},
    "vector": {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "vllm:cache_config_info", "num_gpu_blocks": "1024"}, "value": [1.5, "1"]}]}},
    "scalar": {"status": "success", "data": {"resultType": "scalar", "result": [1700000000.25, "3.5"]}},
    "string": {"status": "success", "data": {"resultType": "string", "result": [1, "text"]}},
    "error": {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
    "data-first": {"data": {"result": [series("1", "a", [[1, "0"]])], "resultType": "matrix"}, "status": "success"},
    "extras": {"status": "success", "warnings": ["w" * 1000, {"nested": [1, [2, [3]]]}], "infos": [],
               "data": {"resultType": "matrix", "stats": {"timings": {"a": 1}}, "result": [
                   series("5", "x", [[2, "1"]])]}},
    "unicode-and-escapes": {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"le": "1", "kvplan_class": "caf\u00e9 \u2603 \"q\" \\ \n"}, "values": [[1, "1e3"]]}]}},
    "numbers": {"status": "success", "data": {"resultType": "matrix", "result": [
        series("2", "n", [[1.0e9, "-0"], [12345678901.125, "1E-300"], [3, "123456789012345678901234567890"]])]}},
}


def expected(doc: dict) -> dict:
    """json.loads's document, with the matrix points as the floats the reader keeps."""
    out = json.loads(json.dumps(doc))
    out = {k: v for k, v in out.items() if k in ("status", "errorType", "error", "data")}
    if "data" in out:
        out["data"] = {k: v for k, v in out["data"].items() if k in ("resultType", "result")}
    return out


def same(got, want) -> bool:
    if isinstance(got, Points):
        return got == want
    if isinstance(got, dict):
        return isinstance(want, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in got)
    if isinstance(got, list):
        return isinstance(want, list) and len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))
    return got == want


SPACINGS = {"compact": {"separators": (",", ":")}, "spaced": {"indent": 3}, "ascii": {"ensure_ascii": True},
            "utf8": {"ensure_ascii": False}}


@pytest.mark.parametrize("size", [1, 7, 4096, CHUNK], ids=lambda s: f"reads-of-{s}")
@pytest.mark.parametrize("spacing", sorted(SPACINGS))
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_differential_against_json_loads(name, spacing, size):
    body = json.dumps(CORPUS[name], **SPACINGS[spacing]).encode()
    got = read_answer(reader(body, size), what="q", max_series=100)
    assert same(got, expected(CORPUS[name])), (got, expected(CORPUS[name]))


MALFORMED = {
    "empty": b"",
    "not-json": b"<html>502 Bad Gateway</html>",
    "truncated-in-series": b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"le":"1"},"val',
    "truncated-after-comma": b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}},',
    "missing-close": b'{"status":"success","data":{"resultType":"matrix","result":[]}',
    "trailing-garbage": b'{"status":"success","data":{"resultType":"matrix","result":[]}} x',
    "bad-utf8": b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"le":"\xff"}}]}}',
    "array-top": b'[1, 2]',
    "missing-colon": b'{"status" "success"}',
    "deep-extra": b'{"status":"success","x":' + b"[" * 100 + b"]" * 100 + b"}",
}


@pytest.mark.parametrize("size", [1, 5, CHUNK], ids=lambda s: f"reads-of-{s}")
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_bodies_are_not_json(name, size):
    with pytest.raises(Malformed):
        read_answer(reader(MALFORMED[name], size), what="q", max_series=100)


def matrix(result: list) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


BOUNDS = {
    # name: (body, kwargs, reason, needle)
    "too-many-series": (matrix([series("1", str(i), []) for i in range(11)]), {"max_series": 10},
                        C.TOO_MANY_SERIES, "more than 10 series"),
    "too-many-points": (matrix([series("1", "a", [[i, "1"] for i in range(4)])]), {"max_points": 3},
                        C.PROMETHEUS_BAD_RESPONSE, "more than the 3 steps"),
    "element-too-long": (matrix([series("1", "a" * (2 << 20), [])]), {}, C.PROMETHEUS_BAD_RESPONSE, "longer than"),
    "retained-budget": (matrix([series(str(i), f"k{i}", [[1, "1"]]) for i in range(200)]), {"budget": 50_000},
                        C.PROMETHEUS_BAD_RESPONSE, "would keep more than"),
    "point-not-a-pair": (matrix([series("1", "a", [[1, "1", 2]])]), {}, C.PROMETHEUS_BAD_RESPONSE, "[time, value]"),
    "point-not-a-number": (matrix([series("1", "a", [[1, "many"]])]), {}, C.PROMETHEUS_BAD_RESPONSE,
                           "a sample value or timestamp is not a number"),
    "time-not-a-number": (matrix([series("1", "a", [["t", "1"]])]), {}, C.PROMETHEUS_BAD_RESPONSE,
                          "a sample value or timestamp is not a number"),
}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_bounds_are_named_reasons(name):
    body, kwargs, reason, needle = BOUNDS[name]
    kwargs = {"max_series": 1000, **kwargs}
    with pytest.raises(PromError) as info:
        read_answer(reader(body, 65536), what="range query", **kwargs)
    assert info.value.reason == reason and needle in str(info.value) and "range query" in str(info.value)


def test_strings_are_shared_between_series():
    body = matrix([series("+Inf", "chat", [[1, "1"]]) for _ in range(50)])
    got = read_answer(reader(body, 64), what="q", max_series=100)["data"]["result"]
    assert len({id(s["metric"]["le"]) for s in got}) == 1 and len({id(s["metric"]["kvplan_class"]) for s in got}) == 1


# --- huge answers through the real client: memory stays bounded, the reason is named --------------------------
def _huge_error(status: int) -> bytes:
    """A 35 MiB JSON error body that also holds a huge matrix: only its head may be read."""
    filler = [series(str(i), "k", [[1, "1"]] * 8) for i in range(260_000)]
    return json.dumps({"status": "error", "errorType": "execution", "error": "x", "data": {"resultType": "matrix",
                                                                                         "result": filler}}).encode()


@pytest.mark.parametrize(("status", "reason"), [
    pytest.param(400, C.PROMETHEUS_REJECTED, id="400"), pytest.param(422, C.PROMETHEUS_REJECTED, id="422"),
    pytest.param(500, C.PROMETHEUS_UNAVAILABLE, id="500"), pytest.param(503, C.PROMETHEUS_UNAVAILABLE, id="503"),
    pytest.param(302, C.PROMETHEUS_REJECTED, id="302")])
@pytest.mark.slow
def test_a_huge_error_body_is_never_parsed_whole(status, reason):
    import tracemalloc

    from kvplan_operator.prom import PromClient
    from op_fakes import scripted_prometheus  # type: ignore[import-not-found]

    body = _huge_error(status)
    assert len(body) > 30 * 2**20
    with scripted_prometheus() as (script, url):
        script.answers["/api/v1/query"] = (status, {"Content-Type": "application/json"}, body)
        tracemalloc.start()
        try:
            with pytest.raises(PromError) as info:
                PromClient(url, timeout_s=30).query("up")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert info.value.reason == reason, str(info.value)
    assert peak < 8 * 2**20, f"reading a {len(body) >> 20} MiB error body peaked at {peak >> 20} MiB"


@pytest.mark.parametrize("t", ["NaN", "+Inf", "-Inf"])
@pytest.mark.parametrize("compact", [True, False], ids=["streamed", "dicts"])
def test_a_sample_time_that_is_not_finite_is_a_bad_response(t, compact):
    """Found while widening: a NaN or infinite time was taken as a window of its own."""
    from kvplan_operator.observe.history import windows_by_key

    result = [series("10", "a", [[t, "1"], [2, "1"]]), series("+Inf", "a", [[t, "2"], [2, "2"]])]
    data = read_answer(reader(matrix(result), 4096), what="q", max_series=10)["data"] if compact else \
        {"resultType": "matrix", "result": result}
    with pytest.raises(PromError) as info:
        windows_by_key(data, "kvplan_class", max_windows=48)
    assert info.value.reason == C.PROMETHEUS_BAD_RESPONSE and "time is not a finite number" in str(info.value)
