"""The public surface: every exported name resolves, and each error is exported with the API
that raises it (core errors from ``ctrlrun``, the documents' from ``ctrlrun.documents``, the
durable patterns' from ``ctrlrun.durable``; all of them from ``ctrlrun.errors``)."""

from __future__ import annotations

import importlib
import inspect

import pytest

import ctrlrun
import ctrlrun.errors
from ctrlrun.errors import chain, core, documents, durable

PACKAGES = [
    "ctrlrun",
    "ctrlrun.errors",
    "ctrlrun.documents",
    "ctrlrun.durable",
    "ctrlrun.store",
    "ctrlrun.testing",
    "ctrlrun.checkpoints",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_once(package):
    module = importlib.import_module(package)
    assert all(hasattr(module, name) for name in module.__all__)
    assert len(set(module.__all__)) == len(module.__all__)


def _errors_of(module) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }


@pytest.mark.parametrize(
    ("defined_in", "exported_by"),
    [
        (core, "ctrlrun"),
        (documents, "ctrlrun.documents"),
        (durable, "ctrlrun.durable"),
        (chain, "ctrlrun.checkpoints"),
    ],
)
def test_each_error_is_exported_with_its_api_and_from_errors(defined_in, exported_by):
    defined = _errors_of(defined_in)
    assert defined <= set(ctrlrun.errors.__all__)
    assert defined <= set(importlib.import_module(exported_by).__all__)


def test_the_top_level_exports_no_error_of_another_package():
    others = _errors_of(documents) | _errors_of(durable) | _errors_of(chain)
    assert not others & set(ctrlrun.__all__)
