"""Effect-key and resource templates: literal text with typed ``{identifier}`` placeholders.

Grammar: any text without braces, ``{name}`` (a non-empty ``str`` value) and ``{name:int}``
(an ``int`` value that is not a ``bool``), where ``name`` is a Python-style identifier. No
escapes, no other format specs, no attribute or index access, no stray brace. A template is
parsed once (at decoration or policy load) and rendered per call.

Two different argument values never render one key (decision 0026):

* a placeholder takes one type, so ``5`` and ``"5"`` cannot both be accepted by it;
* two placeholders must be separated by literal text (``k:{a}{b}`` is refused at parse);
* a value must not hide the literal that follows its placeholder: ``k:{a}:{b}`` refuses
  ``a="1:2"``, so ``("1:2", "3")`` and ``("1", "2:3")`` cannot meet as ``k:1:2:3``. The last
  placeholder's value is free (what follows it is fixed).

These rules only ever refuse: every value still accepted renders exactly as it did before
them, so keys already reserved keep their meaning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from ctrlrun.errors import EffectKeyError, InvalidArgument

_TOKEN: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::(int))?\}|([^{}]+)|(.)", re.DOTALL)
_TYPE_SPEC: Final = re.compile(r":int\}")

RESOURCE: Final = "resource"
"""The placeholder that names the action's ``resource`` field rather than an argument."""
INT: Final = "int"
"""The type of a ``{name:int}`` placeholder."""
STR: Final = "str"
"""The type of a plain ``{name}`` placeholder."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template. ``parts`` alternates literal text and placeholder names; ``ints``
    names the placeholders typed ``:int`` (every other one takes text)."""

    source: str
    parts: tuple[tuple[bool, str], ...]  # (is_placeholder, text)
    ints: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, source: str) -> Template:
        """Parse ``source``; ``InvalidArgument`` on a stray brace, a bad name, a format spec
        other than ``:int``, two placeholders with nothing between them, one name given two
        types, or empty text."""
        if not isinstance(source, str) or not source:
            raise InvalidArgument(f"a template must be a non-empty string, got {source!r}")
        parts: list[tuple[bool, str]] = []
        types: dict[str, str] = {}
        for match in _TOKEN.finditer(source):
            name, kind, literal, stray = match.groups()
            if stray is not None:
                raise InvalidArgument(
                    f"template {source!r}: stray or malformed brace at offset {match.start()}"
                    " (placeholders are {identifier} or {identifier:int}; no escapes or other"
                    " format specs)"
                )
            if name is None:
                parts.append((False, literal))
                continue
            if parts and parts[-1][0]:
                raise InvalidArgument(
                    f"template {source!r}: {{{parts[-1][1]}}} and {{{name}}} touch; separate"
                    " placeholders with literal text (as in 'k:{a}:{b}'), or two different"
                    " values could render one key"
                )
            if types.setdefault(name, kind or STR) != (kind or STR):
                raise InvalidArgument(f"template {source!r}: {{{name}}} is given two types")
            parts.append((True, name))
        if types.get(RESOURCE, STR) != STR:
            raise InvalidArgument(f"template {source!r}: {{resource}} is text; it takes no type")
        return cls(source, tuple(parts), frozenset(n for n, k in types.items() if k == INT))

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The placeholder names, in order of appearance."""
        return tuple(text for is_name, text in self.parts if is_name)

    @property
    def shape(self) -> str:
        """The source without its types: what the store remembers of it (decision 0026). A
        type only refuses values, never changes how one renders, so ``k:{a:int}`` reserves
        exactly the keys ``k:{a}`` reserved for integers."""
        return _shape(self.source)

    def render(self, arguments: Mapping[str, Any], resource: str | None = None) -> str:
        """The key for these arguments; ``EffectKeyError`` naming the placeholder that failed.

        A ``{name}`` value must be a non-empty ``str``, a ``{name:int}`` value an ``int`` that
        is not a ``bool``; a value may not hide the literal that follows it (module
        docstring). ``{resource}`` reads the action's resource, and is ambiguous (refused) if
        an argument is also named so.
        """
        out: list[str] = []
        parts = self.parts
        for index, (is_name, text) in enumerate(parts):
            if not is_name:
                out.append(text)
                continue
            value = _value(self.source, text, text in self.ints, arguments, resource)
            # the literal after this value, when another placeholder follows it
            following = parts[index + 1][1] if index + 2 < len(parts) else ""
            if following and (value + following).find(following) < len(value):
                raise EffectKeyError(
                    f"template {self.source!r}: the value of {{{text}}} contains"
                    f" {following!r}, the text that follows it, so the key would not say where"
                    f" it ends; got {value!r}",
                    placeholder=text,
                )
            out.append(value)
        return "".join(out)


@lru_cache(maxsize=256)
def _shape(source: str) -> str:
    """``Template.shape``: read on every call with a templated key, so once per source."""
    return _TYPE_SPEC.sub("}", source)


def _value(
    source: str, name: str, integer: bool, arguments: Mapping[str, Any], resource: str | None
) -> str:
    if name == RESOURCE:
        if RESOURCE in arguments:
            raise EffectKeyError(
                f"template {source!r}: {{resource}} is ambiguous: an argument is also named"
                " 'resource'",
                placeholder=name,
            )
        value: Any = resource
    elif name in arguments:
        value = arguments[name]
    else:
        raise EffectKeyError(f"template {source!r}: no argument named {name!r}", placeholder=name)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if integer and not is_int:
        raise EffectKeyError(
            f"template {source!r}: {{{name}:int}} must be an integer, got {value!r}",
            placeholder=name,
        )
    if not integer and (not isinstance(value, str) or value == ""):
        hint = f"; write {{{name}:int}} to key it by an integer" if is_int else ""
        raise EffectKeyError(
            f"template {source!r}: {{{name}}} must be a non-empty string, got {value!r}{hint}",
            placeholder=name,
        )
    return str(value)  # as before decision 0026: a value accepted then renders the same now
