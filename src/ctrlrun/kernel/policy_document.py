"""Validation of a parsed policy document (plain mappings, lists and scalars) into entries.

The schema is closed at every level: an unknown key, a missing required key, a value of the
wrong type or a value the model refuses becomes a ``PolicyError`` that names the dotted key
path (``actions.stripe.refund.rules[1].when.amount_lte``) and, when the parser recorded it,
the line. No other exception leaves this module. Rule indexes are zero-based, as in the
``rule[N]`` labels on receipts. See docs/policy.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn, ParamSpec, TypeVar

from ctrlrun.errors import InvalidArgument, PolicyError
from ctrlrun.kernel.action import check_action_name
from ctrlrun.kernel.approval import check_person
from ctrlrun.kernel.approval_rules import APPROVAL_KEYS, DEFAULT_RULES, ApprovalRules
from ctrlrun.kernel.argument_display import DISPLAY_KEYS, Money
from ctrlrun.kernel.budget import BUDGET_KEYS, Budget
from ctrlrun.kernel.identity import identity_key
from ctrlrun.kernel.notify import NotifyTarget, parse_targets
from ctrlrun.kernel.policy_model import (
    POLICY_SCHEMA,
    ActionPolicy,
    Condition,
    ControlEntry,
    Decision,
    Mode,
    Rule,
    check_control_ids,
    check_max_attempts,
    check_mode,
    check_resource_template,
    first_unreachable,
    json_type,
)
from ctrlrun.kernel.signing import check_public_key
from ctrlrun.kernel.template import Template

PolicyParts = tuple[
    tuple[ActionPolicy, ...],
    tuple[ControlEntry, ...],
    dict[str, str],
    tuple[NotifyTarget, ...],
    Mode,
]
"""What a policy document holds: entries, controls, approver keys, notify targets, mode."""

KeyPath = tuple[str | int, ...]
"""Where a value sits in the document: mapping keys and list indexes, from the top."""

LineMap = Mapping[KeyPath, int]
"""The 1-based line of each key (for a mapping entry) or item (for a list member)."""

_P = ParamSpec("_P")
_T = TypeVar("_T")

_TOP_KEYS: Final = ("schema", "mode", "actions", "controls", "approvals", "approvers", "notify")
_TOP_REQUIRED: Final = ("schema", "actions")
_ENTRY_KEYS: Final = (
    "decision",
    "rules",
    "effect",
    "resource",
    "max_attempts",
    "description",
    "controls",
    "approval",
    "display",
    "mode",
    "budget",
)
_RULE_KEYS: Final = ("when", "decision", "controls", "approval")
_CONTROL_KEYS: Final = ("title", "source")
_DECISIONS: Final = frozenset(decision.value for decision in Decision)
_DECISION_LIST: Final = ", ".join(decision.value for decision in Decision)


def render_path(path: KeyPath) -> str:
    """``("actions", "a.b", "rules", 1)`` as ``actions.a.b.rules[1]``; ``()`` as ``""``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def policy_error(
    problem: str, *, path: KeyPath = (), line: int | None = None, source: str | None = None
) -> PolicyError:
    """A ``PolicyError`` whose message leads with ``source:line: key:`` where they are known."""
    key = render_path(path) or None
    where = ":".join(str(part) for part in (source, line) if part is not None)
    if where and source is None:
        where = f"line {where}"
    prefix = "".join(f"{part}: " for part in (where, key) if part)
    return PolicyError(prefix + problem, key=key, line=line, path=source)


class _Reader:
    """Walks one document, turning every refusal into a located ``PolicyError``."""

    def __init__(self, lines: LineMap, source: str | None) -> None:
        self.lines = lines
        self.source = source

    def line(self, path: KeyPath) -> int | None:
        """The line of ``path`` or, failing that, of its nearest recorded ancestor."""
        for end in range(len(path), -1, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
        return None

    def fail(self, path: KeyPath, problem: str) -> NoReturn:
        raise policy_error(problem, path=path, line=self.line(path), source=self.source)

    def checked(
        self, path: KeyPath, check: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """``check(*args)``, its ``InvalidArgument`` re-raised as a ``PolicyError`` at ``path``."""
        try:
            return check(*args, **kwargs)
        except InvalidArgument as error:
            self.fail(path, error.message)

    def mapping(
        self, value: object, path: KeyPath, allowed: tuple[str, ...], required: tuple[str, ...]
    ) -> Mapping[str, Any]:
        """``value`` if it is a mapping with only ``allowed`` keys and every ``required`` one."""
        found = self.any_mapping(value, path, "a mapping")
        for key in found:
            if key not in allowed:
                self.fail((*path, key), f"unknown key; expected one of {', '.join(allowed)}")
        for key in required:
            if key not in found:
                self.fail((*path, key), "missing required key")
        return found

    def any_mapping(self, value: object, path: KeyPath, what: str) -> Mapping[str, Any]:
        """``value`` if it is a mapping whose keys are all strings."""
        if not isinstance(value, Mapping):
            self.fail(path, f"must be {what}, got {json_type(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, got {key!r}")
        return value


def parse_policy_document(
    data: object, *, lines: LineMap | None = None, source: str | None = None
) -> PolicyParts:
    """The action entries of a ``ctrlrun.policy/v1`` document, in document order, the
    controls its ``controls`` section defines, the approvers' public keys by name and the
    targets ``notify`` names.

    Raises ``PolicyError`` (naming the key path, the line when ``lines`` has it, and
    ``source`` as ``path``) for any departure from the schema, a control cited by an entry or
    a rule that the ``controls`` section does not define included; raises nothing else.
    """
    reader = _Reader(lines or {}, source)
    top = reader.mapping(data, (), _TOP_KEYS, _TOP_REQUIRED)
    schema = top["schema"]
    if schema != POLICY_SCHEMA:
        reader.fail(("schema",), f"must be {POLICY_SCHEMA!r}, got {schema!r}")
    controls = _controls(reader, top.get("controls", {}))
    actions = reader.any_mapping(top["actions"], ("actions",), "a mapping of action names")
    defaults = _approval(reader, top.get("approvals", {}), ("approvals",), DEFAULT_RULES)
    entries = tuple(_entry(reader, name, body, defaults) for name, body in actions.items())
    defined = {control.control_id for control in controls}
    for entry in entries:
        _check_cited(reader, entry, defined)
    approvers = _approvers(reader, top.get("approvers", {}))
    notify = reader.checked(("notify",), parse_targets, top.get("notify", []))
    mode = reader.checked(("mode",), check_mode, top.get("mode", Mode.ENFORCE.value))
    return entries, controls, approvers, notify, mode


def _approvers(reader: _Reader, value: object) -> dict[str, str]:
    registry = reader.any_mapping(value, ("approvers",), "a mapping of approver names")
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for name, body in registry.items():
        path: KeyPath = ("approvers", name)
        reader.checked(path, check_person, name)
        twin = seen.setdefault(identity_key(name), name)
        if twin != name:  # two keys for one identity would count it twice in a quorum
            reader.fail(path, f"{name!r} and {twin!r} are one identity (docs/approvals.md)")
        fields = reader.mapping(body, path, ("key",), ("key",))
        out[name] = reader.checked((*path, "key"), check_public_key, fields["key"])
    return out


def _controls(reader: _Reader, value: object) -> tuple[ControlEntry, ...]:
    registry = reader.any_mapping(value, ("controls",), "a mapping of control ids")
    out = []
    for control_id, body in registry.items():
        path: KeyPath = ("controls", control_id)
        fields = reader.mapping(body, path, _CONTROL_KEYS, ("title",))
        out.append(
            reader.checked(
                path, ControlEntry, control_id, fields["title"], source=fields.get("source")
            )
        )
    return tuple(out)


def _check_cited(reader: _Reader, entry: ActionPolicy, defined: set[str]) -> None:
    path: KeyPath = ("actions", entry.name)
    places = [((*path, "controls"), entry.controls)]
    places += [((*path, "rules", i, "controls"), r.controls) for i, r in enumerate(entry.rules)]
    for where, cited in places:
        for control_id in cited:
            if control_id not in defined:
                reader.fail(
                    where, f"cites control {control_id!r}, which 'controls' does not define"
                )


def _approval(reader: _Reader, value: object, path: KeyPath, base: ApprovalRules) -> ApprovalRules:
    body = reader.mapping(value, path, APPROVAL_KEYS, ())
    return reader.checked(path, ApprovalRules.parse, dict(body), base)


def _entry(reader: _Reader, name: str, body: object, defaults: ApprovalRules) -> ActionPolicy:
    path: KeyPath = ("actions", name)
    reader.checked(path, check_action_name, name)
    entry = reader.mapping(body, path, _ENTRY_KEYS, ())
    for key, value in entry.items():
        if value is None:  # `max_attempts:` with nothing after it is a slip, not "unbounded"
            reader.fail((*path, key), "is empty (null): give a value or leave the key out")
    if ("decision" in entry) == ("rules" in entry):
        where = (*path, "rules") if "rules" in entry else path
        reader.fail(where, "give exactly one of 'decision' and 'rules'")
    decision = _decision(reader, entry["decision"], path) if "decision" in entry else None
    rules = _rules(reader, entry["rules"], (*path, "rules"), defaults) if "rules" in entry else ()
    description = entry.get("description")
    if "description" in entry and not isinstance(description, str):
        reader.fail((*path, "description"), f"must be a string, got {json_type(description)}")
    return reader.checked(
        path,
        ActionPolicy,
        name,
        decision=decision,
        rules=rules,
        effect=_template(reader, entry, path, "effect"),
        resource=_template(reader, entry, path, "resource"),
        max_attempts=reader.checked(
            (*path, "max_attempts"), check_max_attempts, entry.get("max_attempts")
        ),
        description=description,
        controls=_cited_ids(reader, entry, path),
        approval=_approval(reader, entry.get("approval", {}), (*path, "approval"), defaults),
        display=_display(reader, entry.get("display", {}), (*path, "display")),
        mode=_mode(reader, entry, path),
        budget=_budget(reader, entry, path),
    )


def _display(reader: _Reader, value: object, path: KeyPath) -> tuple[tuple[str, Money], ...]:
    """``display:``: argument name → ``{money: EUR, minor: 2}`` (closed keys, ``money``
    required)."""
    shown = reader.any_mapping(value, path, "a mapping of argument names")
    out = []
    for argument, body in shown.items():
        here = (*path, argument)
        fields = reader.mapping(body, here, DISPLAY_KEYS, ("money",))
        money = fields["money"]
        minor = fields.get("minor", 2)
        out.append((argument, reader.checked(here, Money, money, minor)))
    return tuple(out)


def _budget(reader: _Reader, entry: Mapping[str, Any], path: KeyPath) -> Budget | None:
    if "budget" not in entry:
        return None
    here = (*path, "budget")
    body = reader.mapping(entry["budget"], here, BUDGET_KEYS, ("sum", "limit"))
    return reader.checked(here, Budget.parse, body)


def _mode(reader: _Reader, entry: Mapping[str, Any], path: KeyPath) -> Mode | None:
    if "mode" not in entry:
        return None
    return reader.checked((*path, "mode"), check_mode, entry["mode"])


def _cited_ids(reader: _Reader, body: Mapping[str, Any], parent: KeyPath) -> tuple[str, ...]:
    if "controls" not in body:
        return ()
    return reader.checked((*parent, "controls"), check_control_ids, body["controls"])


def _decision(reader: _Reader, value: object, parent: KeyPath) -> Decision:
    if not isinstance(value, str) or value not in _DECISIONS:
        reader.fail((*parent, "decision"), f"must be one of {_DECISION_LIST}, got {value!r}")
    return Decision(value)


def _template(
    reader: _Reader, entry: Mapping[str, Any], parent: KeyPath, key: str
) -> Template | None:
    if key not in entry:
        return None
    path = (*parent, key)
    template = reader.checked(path, Template.parse, entry[key])
    if key == "resource":
        reader.checked(path, check_resource_template, template)
    return template


def _rules(
    reader: _Reader, value: object, path: KeyPath, defaults: ApprovalRules
) -> tuple[Rule, ...]:
    if not isinstance(value, list | tuple):
        reader.fail(path, f"must be a list of rules, got {json_type(value)}")
    if not value:
        reader.fail(path, "must list at least one rule; to refuse every call write decision: deny")
    rules = tuple(_rule(reader, item, (*path, index), defaults) for index, item in enumerate(value))
    unreachable = first_unreachable(rules)
    if unreachable is not None:
        reader.fail(
            (*path, unreachable),
            f"can never match: rule [{unreachable - 1}] has no 'when' and always matches",
        )
    return rules


def _rule(reader: _Reader, value: object, path: KeyPath, defaults: ApprovalRules) -> Rule:
    rule = reader.mapping(value, path, _RULE_KEYS, ("decision",))
    decision = _decision(reader, rule["decision"], path)
    controls = _cited_ids(reader, rule, path)
    approval = None
    if "approval" in rule:  # over the policy's `approvals:`, in place of the action's
        if decision is not Decision.APPROVE:
            reader.fail((*path, "approval"), f"only a rule that decides approve, not {decision}")
        approval = _approval(reader, rule["approval"], (*path, "approval"), defaults)
    if "when" not in rule:
        return Rule((), decision, controls, approval)
    when_path = (*path, "when")
    when = reader.any_mapping(rule["when"], when_path, "a mapping of conditions")
    if not when:
        reader.fail(when_path, "has no conditions; leave 'when' out for a rule that always matches")
    conditions = tuple(
        reader.checked((*when_path, key), Condition.parse, key, item) for key, item in when.items()
    )
    return reader.checked(path, Rule, conditions, decision, controls, approval)
