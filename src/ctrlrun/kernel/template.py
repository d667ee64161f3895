"""Effect-key and resource templates: literal text with ``{identifier}`` placeholders.

Grammar: any text without braces, and ``{name}`` where ``name`` is a Python-style identifier.
No escapes, no format specs, no attribute or index access, no stray brace. A template is parsed
once (at decoration or policy load) and rendered per call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ctrlrun.errors import EffectKeyError, InvalidArgument

_TOKEN: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}|([^{}]+)|(.)", re.DOTALL)

RESOURCE: Final = "resource"
"""The placeholder that names the action's ``resource`` field rather than an argument."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template. ``parts`` alternates literal text and placeholder names."""

    source: str
    parts: tuple[tuple[bool, str], ...]  # (is_placeholder, text)

    @classmethod
    def parse(cls, source: str) -> Template:
        """Parse ``source``; ``InvalidArgument`` on a stray brace, a bad name or empty text."""
        if not isinstance(source, str) or not source:
            raise InvalidArgument(f"a template must be a non-empty string, got {source!r}")
        parts: list[tuple[bool, str]] = []
        for match in _TOKEN.finditer(source):
            name, literal, stray = match.groups()
            if stray is not None:
                raise InvalidArgument(
                    f"template {source!r}: stray or malformed brace at offset {match.start()}"
                    " (placeholders are {identifier}; no escapes or format specs)"
                )
            parts.append((True, name) if name is not None else (False, literal))
        return cls(source, tuple(parts))

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The placeholder names, in order of appearance."""
        return tuple(text for is_name, text in self.parts if is_name)

    def render(self, arguments: Mapping[str, Any], resource: str | None = None) -> str:
        """The key for these arguments; ``EffectKeyError`` naming the placeholder that failed.

        A value must be a non-empty ``str`` or an ``int`` that is not a ``bool``. ``{resource}``
        reads the action's resource, and is ambiguous (refused) if an argument is also named so.
        """
        out: list[str] = []
        for is_name, text in self.parts:
            out.append(_value(self.source, text, arguments, resource) if is_name else text)
        return "".join(out)


def _value(source: str, name: str, arguments: Mapping[str, Any], resource: str | None) -> str:
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
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise EffectKeyError(
            f"template {source!r}: {{{name}}} must be a non-empty string or an integer,"
            f" got {value!r}",
            placeholder=name,
        )
    return str(value)
