"""Store URLs: ``sqlite:///abs/path.db``, ``sqlite://relative.db``, ``postgresql://…``.

For Postgres the schema travels as ctrlrun's own ``ctrlrun_schema`` query parameter, peeled off
here so the driver receives the URL otherwise unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ctrlrun.errors import InvalidArgument

SCHEMA_PARAM: Final = "ctrlrun_schema"


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL: ``kind`` is ``sqlite`` or ``postgres``; ``target`` the file path or
    the driver URL (without ``ctrlrun_schema``); ``schema`` the Postgres schema."""

    kind: str
    target: str
    schema: str = "public"


def parse_store_url(url: str) -> StoreURL:
    """Parse ``url``; ``InvalidArgument`` naming the accepted forms otherwise."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument("a store URL must be a non-empty string")
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if not path:
            raise InvalidArgument(f"{url!r} names no file: use sqlite:///path/to/state.db")
        return StoreURL("sqlite", path)
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        params = parse_qsl(parts.query, keep_blank_values=True)
        schemas = [value for name, value in params if name == SCHEMA_PARAM]
        if len(schemas) > 1:
            raise InvalidArgument(f"{SCHEMA_PARAM} given {len(schemas)} times in the store URL")
        rest = urlencode([(n, v) for n, v in params if n != SCHEMA_PARAM])
        target = urlunsplit(parts._replace(query=rest))
        return StoreURL("postgres", target, schemas[0] if schemas else "public")
    raise InvalidArgument(
        f"unsupported store URL {url.split('://', maxsplit=1)[0]!r}://…: use sqlite:///path/to/state.db"
        " or postgresql://…[?ctrlrun_schema=name]"
    )
