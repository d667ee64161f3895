"""``ctrlrun check MODULE…``: does the policy fit every protected function these modules define?

Each module is imported (the working directory first on ``sys.path``, as ``python -m`` does)
and every function protected with ``@protect`` found in it, or in a class defined in it, is
checked against the policy (``plan_protection``): an action the policy does not name, a
template or rule naming an argument the function lacks, an action every call of which is
denied, an effect-key placeholder whose type (``{p}`` text, ``{p:int}`` integer; decision
0026) disagrees with its parameter's ``int``/``str`` annotation. Exit 0 when everything fits;
1 on any finding (the findings on stdout, one ``Error: …`` line on stderr) or refusal.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from ctrlrun.cli.common import Refusal, json_line, say, table
from ctrlrun.config import load_policy_file
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.protection import Finding, plan_key_types, plan_protection
from ctrlrun.runtime.locate import policy_path


@click.command("check")
@click.argument("modules", nargs=-1, required=True, metavar="MODULE...")
@click.option("--policy", "policy", metavar="PATH", help="The policy file (ctrlrun.yaml).")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per finding.")
def check(modules: tuple[str, ...], policy: str | None, as_json: bool) -> None:
    """Check every protected function in MODULE… against the policy; exit 1 on any finding."""
    path = policy_path(policy)
    if not path.is_file():
        raise Refusal(f"no policy file at {path.absolute()} (give --policy or run `ctrlrun init`)")
    loaded = load_policy_file(path)
    rows: list[tuple[str, Finding]] = []
    count = 0
    for where, fn in _protected(modules):
        count += 1
        rows += [(where, f) for f in _findings(loaded, fn)]
    if as_json:
        for where, f in rows:
            json_line({"function": where, "action": f.action, "kind": f.kind, "detail": f.detail})
    elif rows:
        table(
            [(where, f.action, f.kind, f.detail) for where, f in rows],
            header=("FUNCTION", "ACTION", "FINDING", "DETAIL"),
        )
    if not count:
        raise Refusal(f"no protected function found in {', '.join(modules)}")
    if rows:
        misfits = len({where for where, _ in rows})
        raise Refusal(
            f"{len(rows)} finding(s) in {misfits} of {count} protected function(s): the policy"
            " does not fit them"
        )
    if not as_json:
        say(f"ok: {count} protected function(s) fit the policy {path}")


def _findings(policy: Policy, fn: Any) -> tuple[Finding, ...]:
    name, (effect, resource) = fn.__ctrlrun_action__, fn.__ctrlrun_templates__
    found = plan_protection(
        policy, name, fn.__ctrlrun_parameters__, effect=effect, resource=resource
    )
    entry = policy.entry(name)
    template = effect or (entry.effect if entry is not None else None)
    return found + plan_key_types(name, template, _annotations(fn))


def _annotations(fn: Any) -> dict[str, str]:
    """Each parameter's annotation as written (``int``, ``"int"``): for the key-type check."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    shown = {}
    for parameter in parameters:
        note = parameter.annotation
        shown[parameter.name] = note if isinstance(note, str) else getattr(note, "__name__", "")
    return shown


def _protected(modules: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """``(module:qualname, function)`` for every protected function, each once, in order."""
    seen: set[int] = set()
    for name in modules:
        module = _import(name)
        for value in _members(module):
            if hasattr(value, "__ctrlrun_action__") and id(value) not in seen:
                seen.add(id(value))
                yield f"{name}:{getattr(value, '__qualname__', '?')}", value


def _members(module: ModuleType) -> Iterator[Any]:
    for value in list(vars(module).values()):
        yield value
        if isinstance(value, type) and value.__module__ == module.__name__:
            yield from (vars(value).get(key) for key in list(vars(value)))


def _import(name: str) -> ModuleType:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the module's own failure, reported as one line
        raise Refusal(f"cannot import {name}: {type(exc).__name__}: {exc}") from exc
