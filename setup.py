"""Package discovery that maps the ``operator/`` folder to the import name ``kvplan_operator``.

A top-level package called ``operator`` would shadow the standard library's ``operator`` module, so the folder keeps
its required name and is installed under another one. Data folders (``kvcore/data``) are found as namespace
packages so their files ship in the wheel. Everything else is in ``pyproject.toml``.

The wheel carries ``kvcore``, ``kvplan_operator`` and the vLLM plugins ``kvplan_vllm`` (when that folder exists),
never ``kvplan_dev``: the development tooling is its own distribution (``kvplan_dev/pyproject.toml``).
tests/unit/project/test_packaging.py builds the wheel and checks its file list.
"""

from setuptools import find_namespace_packages, setup

_OPERATOR_DIR = "operator"
_OPERATOR_PKG = "kvplan_operator"
_SKIP = ["*.__pycache__", "*.__pycache__.*"]

packages = find_namespace_packages(include=["kvcore", "kvcore.*", "kvplan_vllm", "kvplan_vllm.*"], exclude=_SKIP)
packages += [
    _OPERATOR_PKG + name[len(_OPERATOR_DIR):]
    for name in find_namespace_packages(include=[_OPERATOR_DIR, _OPERATOR_DIR + ".*"], exclude=_SKIP)
]

setup(
    packages=packages,
    package_dir={_OPERATOR_PKG: _OPERATOR_DIR},
    package_data={"": ["*.csv", "*.json", "README.md", "*.yaml", "py.typed", "LICENSE.vidur"]},
    include_package_data=False,
)
