"""Package discovery that maps the ``operator/`` folder to the import name ``kvplan_operator``.

A top-level package called ``operator`` would shadow the standard library's ``operator`` module, so the folder keeps
its required name and is installed under another one. Everything else is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

_OPERATOR_DIR = "operator"
_OPERATOR_PKG = "kvplan_operator"

packages = find_packages(include=["kvcore", "kvcore.*", "kvplan_dev", "kvplan_dev.*"])
packages += [
    _OPERATOR_PKG + name[len(_OPERATOR_DIR):]
    for name in find_packages(include=[_OPERATOR_DIR, _OPERATOR_DIR + ".*"])
]

setup(
    packages=packages,
    package_dir={_OPERATOR_PKG: _OPERATOR_DIR},
    package_data={"kvcore": ["data/*.csv", "data/*.yaml", "py.typed"], "kvplan_dev": ["gobuild/**/*", "*.yaml"]},
    include_package_data=True,
)
