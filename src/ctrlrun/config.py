"""YAML to ``Policy``: the only module that imports ``yaml`` (docs/policy.md).

The YAML accepted is the JSON subset of it, written as YAML: mappings with string keys, lists,
strings, decimal integers, ``true``/``false`` and null. Everything YAML can say beyond that is
refused with the key path and the line rather than guessed at:

* floats in every spelling (``1.5``, ``1e3``, ``.inf``, ``-.Inf``, ``.nan``): money is integer
  minor units;
* YAML 1.1 surprises: ``yes``/``no``/``on``/``off`` booleans, octal ``012``, ``0x``/``0o``/``0b``
  and ``1_000`` integers, sexagesimal ``1:30``, timestamps;
* duplicate keys (with line and column), non-string keys, merge keys ``<<``;
* anchors, aliases and explicit tags (``!!set``, ``!!binary``, ``!custom``). A policy is read
  by people deciding what an agent may do: every value is written out where it applies, and
  an alias bomb cannot make validation or hashing expand exponentially.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final, NoReturn, cast

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, Event, NodeEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ctrlrun.errors import PolicyError
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.policy_document import KeyPath, policy_error
from ctrlrun.kernel.policy_model import FLOAT_HINT

_TAG: Final = "tag:yaml.org,2002:"
_STR: Final = _TAG + "str"
_INT: Final = _TAG + "int"
_BOOL: Final = _TAG + "bool"
_NULL: Final = _TAG + "null"
_FLOAT: Final = _TAG + "float"
_MERGE: Final = _TAG + "merge"

_DECIMAL: Final = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
# Plain scalars PyYAML (YAML 1.1) leaves as strings but YAML 1.2 reads as numbers: `1e3`,
# `-.5`, `1.0e3`, `0o17`. Read as text, one would compare unequal to the number its author
# meant, so it is refused instead.
_NUMBER_LIKE: Final = re.compile(
    r"[-+]?(?:\.[0-9]|[0-9])[0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|nan)|[-+]?0[oO][0-7_]+",
    re.IGNORECASE,
)


class StrictLoader(yaml.SafeLoader):
    """A ``SafeLoader`` that composes nodes only and notes every anchor and explicit tag.

    Nodes become plain values in this module's own converter, which refuses what the module
    docstring lists; ``SafeLoader``'s constructors (which would build sets, dates, bytes and
    merged mappings) are never called.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.marked: dict[int, str] = {}

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Event = self.peek_event()  # type: ignore[no-untyped-call]
        node = super().compose_node(parent, index)
        # An alias yields the node its anchor was put on, which is marked already and comes
        # earlier in the document, so the alias itself can never be read.
        if isinstance(event, NodeEvent) and not isinstance(event, AliasEvent):
            if event.anchor is not None:
                self.marked[id(node)] = f"anchor &{event.anchor}"
            elif isinstance(event, ScalarEvent | CollectionStartEvent) and event.tag is not None:
                self.marked[id(node)] = f"tag {event.tag.replace(_TAG, '!!', 1)}"
        return node


class _Converter:
    """Turns a node tree into plain data, recording the line of every key and list item."""

    def __init__(self, marked: dict[int, str], source: str | None) -> None:
        self.marked = marked
        self.source = source
        self.lines: dict[KeyPath, int] = {}

    def fail(self, path: KeyPath, node: Node, problem: str) -> NoReturn:
        line = node.start_mark.line + 1 if node.start_mark else None
        raise policy_error(problem, path=path, line=line, source=self.source)

    def value(self, node: Node, path: KeyPath) -> Any:
        mark = self.marked.get(id(node))
        if mark is not None:
            self.fail(path, node, f"{mark}: anchors, aliases and tags are refused")
        if isinstance(node, MappingNode):
            return self.mapping(node, path)
        if isinstance(node, SequenceNode):
            return [self.item(item, (*path, index)) for index, item in enumerate(node.value)]
        return self.scalar(cast(ScalarNode, node), path)  # the third and last kind of node

    def item(self, node: Node, path: KeyPath) -> Any:
        self.lines[path] = node.start_mark.line + 1
        return self.value(node, path)

    def mapping(self, node: MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.key(key_node, path)
            here = (*path, key)
            start = key_node.start_mark
            if key in out:
                self.fail(
                    here,
                    key_node,
                    f"duplicate key {key!r} at line {start.line + 1}, column {start.column + 1}"
                    f" (first at line {self.lines[here]})",
                )
            self.lines[here] = start.line + 1
            out[key] = self.value(value_node, here)
        return out

    def key(self, node: Node, parent: KeyPath) -> str:
        mark = self.marked.get(id(node))
        if mark is not None:
            self.fail(parent, node, f"{mark} on a key: anchors, aliases and tags are refused")
        if not isinstance(node, ScalarNode):
            self.fail(parent, node, "a mapping key must be a string, not a list or a mapping")
        if node.tag == _MERGE:
            self.fail((*parent, "<<"), node, "merge keys (<<) are refused: write the keys out")
        if node.tag != _STR:
            self.fail(
                (*parent, node.value),
                node,
                f"a mapping key must be a string; {node.value!r} reads as {_kind(node)}: quote it",
            )
        return self.text(node, (*parent, node.value))

    def text(self, node: ScalarNode, path: KeyPath) -> str:
        """The scalar's text, unless an escape such as ``"\\ud800"`` left a lone surrogate:
        text without a UTF-8 form has no canonical form and could not be hashed."""
        try:
            node.value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(path, node, "the text holds a lone surrogate escape: it is not Unicode")
        return str(node.value)

    def scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        text: str = node.value
        if node.tag == _STR:
            if node.style is None and _NUMBER_LIKE.fullmatch(text):
                self.fail(
                    path,
                    node,
                    f"{text!r} is a number to YAML 1.2 readers but text to this one: write a"
                    " decimal integer (money in minor units), or quote it to mean text",
                )
            return self.text(node, path)
        if node.tag == _INT:
            if not _DECIMAL.fullmatch(text):
                self.fail(path, node, f"write integers as plain decimals, got {text!r}")
            try:
                return int(text)
            except ValueError:  # longer than the interpreter's digit limit
                self.fail(path, node, f"the integer has {len(text)} digits: too long")
        if node.tag == _BOOL:
            if text.lower() not in ("true", "false"):
                self.fail(path, node, f"{text!r} is ambiguous: write true or false, or quote it")
            return text.lower() == "true"
        if node.tag == _NULL:
            return None
        if node.tag == _FLOAT:
            self.fail(path, node, f"{text!r} is a float; {FLOAT_HINT}")
        self.fail(path, node, f"{text!r} reads as {_kind(node)}, which JSON cannot hold: quote it")


def _kind(node: ScalarNode) -> str:
    """``a bool``, ``a timestamp``: the YAML type a scalar resolved to, for messages."""
    name = node.tag.removeprefix(_TAG)
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def parse_yaml(text: str, *, source: str | None = None) -> tuple[Any, dict[KeyPath, int]]:
    """The plain data of one YAML document and the line of every key path in it.

    Raises ``PolicyError`` (with the line where known) for a syntax error, an empty document,
    more than one document, and every refusal in this module's docstring; raises nothing else.
    """
    if not isinstance(text, str):
        raise policy_error(f"policy text must be str, got {type(text).__name__}", source=source)
    try:
        loader = StrictLoader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
        if root is None or root.tag == _NULL:  # nothing, or a document holding only null
            raise policy_error("the policy is empty", line=1, source=source)
        converter = _Converter(loader.marked, source)
        converter.lines[()] = root.start_mark.line + 1
        return converter.value(root, ()), converter.lines
    except yaml.MarkedYAMLError as error:
        raise _syntax_error(error, source) from error
    except yaml.reader.ReaderError as error:  # a character YAML does not allow
        line = text[: error.position].count("\n") + 1
        problem = f"character U+{error.character:04X} is not allowed in YAML"
        raise policy_error(problem, line=line, source=source) from error
    except RecursionError:
        raise policy_error("nested too deeply to be a policy", source=source) from None


def _syntax_error(error: yaml.MarkedYAMLError, source: str | None) -> PolicyError:
    mark = error.problem_mark or error.context_mark
    problem = "; ".join(part for part in (error.context, error.problem) if part)
    return policy_error(
        f"YAML syntax error: {problem or 'unreadable'}",
        line=mark.line + 1 if mark else None,
        source=source,
    )


def load_policy_text(text: str, *, source: str | None = None) -> Policy:
    """Parse and validate a policy from YAML text; ``source`` names it in errors.

    Raises ``PolicyError`` naming the key path and line, and nothing else.
    """
    data, lines = parse_yaml(text, source=source)
    return Policy.from_document(data, lines=lines, source=source)


def load_policy_file(path: str | os.PathLike[str]) -> Policy:
    """Read, parse and validate the policy file at ``path`` (UTF-8, a BOM tolerated).

    Raises ``PolicyError`` with ``path`` set for a missing, unreadable, non-UTF-8 or empty file
    and for everything ``load_policy_text`` refuses; raises nothing else.
    """
    try:
        name = os.fspath(path)
        if not isinstance(name, str):
            raise TypeError(f"got {type(name).__name__}")
    except TypeError as error:
        raise policy_error(f"a policy path must be str or os.PathLike[str]: {error}") from error
    try:
        data = Path(name).read_bytes()
    except FileNotFoundError:
        raise policy_error("no policy file here", source=name) from None
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise policy_error(f"cannot read the policy file: {reason}", source=name) from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise policy_error(
            f"not UTF-8: byte 0x{data[error.start]:02x} cannot be decoded", line=line, source=name
        ) from None
    return load_policy_text(text, source=name)
