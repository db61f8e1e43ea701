"""Package discovery that maps the ``operator/`` folder to the import name ``kvplan_operator``.

A top-level package called ``operator`` would shadow the standard library's ``operator`` module, so the folder keeps
its required name and is installed under another one. Data folders (``kvcore/data``, ``kvplan_dev/gobuild/*``) are
found as namespace packages so their files ship in the wheel. Everything else is in ``pyproject.toml``.
"""

from setuptools import find_namespace_packages, setup

_OPERATOR_DIR = "operator"
_OPERATOR_PKG = "kvplan_operator"
_SKIP = ["*.__pycache__", "*.__pycache__.*"]

packages = find_namespace_packages(include=["kvcore", "kvcore.*", "kvplan_dev", "kvplan_dev.*", "kvplan_vllm", "kvplan_vllm.*"], exclude=_SKIP)
packages += [
    _OPERATOR_PKG + name[len(_OPERATOR_DIR):]
    for name in find_namespace_packages(include=[_OPERATOR_DIR, _OPERATOR_DIR + ".*"], exclude=_SKIP)
]

setup(
    packages=packages,
    package_dir={_OPERATOR_PKG: _OPERATOR_DIR},
    package_data={"": ["*.csv", "README.md", "*.yaml", "*.go", "go.mod", "go.sum", "py.typed"]},
    include_package_data=False,
)
