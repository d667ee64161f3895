"""Store URLs: ``sqlite:///abs/path.db``, ``sqlite://relative.db``, ``postgresql://…``.

For Postgres the schema travels as ctrlrun's own ``ctrlrun_schema`` query parameter, peeled off
here; every other byte of the URL reaches the driver as it was written (no parameter is decoded
and re-encoded on the way). Nothing here ever puts a URL, or any part of one that could hold a
secret, into an error message: a refusal says what is wrong and where, never what was written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.partition import MAX_PARTITIONS

SCHEMA_PARAM: Final = "ctrlrun_schema"
COMMIT_TIMEOUT_PARAM: Final = "ctrlrun_commit_timeout"
REQUIRE_SYNC_PARAM: Final = "ctrlrun_require_sync"
PARTITIONS_PARAM: Final = "ctrlrun_partitions"
_TRUTH: Final = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
FORMS: Final = "sqlite:///path/to/state.db or postgresql://…[?ctrlrun_schema=name]"
SECRET_PARAMS: Final = frozenset({"password", "sslpassword"})
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}://")
_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
_IN_MEMORY: Final = (":memory:", "/:memory:")


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL: ``kind`` is ``sqlite`` or ``postgres``; ``target`` the file path or
    the driver URL (without ctrlrun's own parameters); ``schema`` the Postgres schema;
    ``commit_timeout`` (seconds, None when not given) and ``require_sync`` the Postgres
    store's durability options (``ctrlrun_commit_timeout``, ``ctrlrun_require_sync``);
    ``partitions`` the receipt chains a new store is created with (``ctrlrun_partitions``,
    None when not given)."""

    kind: str
    target: str
    schema: str = "public"
    commit_timeout: float | None = None
    require_sync: bool = False
    partitions: int | None = None


def parse_store_url(url: str) -> StoreURL:
    """Parse ``url``; ``InvalidArgument`` naming the accepted forms otherwise (never echoing
    the URL: it may hold a password)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument(f"the store URL is empty: give {FORMS}")
    if url.startswith("sqlite://"):
        return StoreURL("sqlite", _sqlite_path(url[len("sqlite://") :]))
    if url.startswith(("postgresql://", "postgres://")):
        _check_escapes(url)
        target, schemas = split_param(url, SCHEMA_PARAM)
        target, timeouts = split_param(target, COMMIT_TIMEOUT_PARAM)
        target, syncs = split_param(target, REQUIRE_SYNC_PARAM)
        target, counts = split_param(target, PARTITIONS_PARAM)
        return StoreURL(
            "postgres",
            target,
            _one(SCHEMA_PARAM, schemas) or "public",
            commit_timeout=_seconds(_one(COMMIT_TIMEOUT_PARAM, timeouts)),
            require_sync=_truth(_one(REQUIRE_SYNC_PARAM, syncs)),
            partitions=_count(_one(PARTITIONS_PARAM, counts)),
        )
    scheme = _SCHEME.match(url)
    if scheme is None:
        raise InvalidArgument(
            f"the store URL is not a URL (a key/value connection string such as 'host=…"
            f" dbname=…' is not accepted: write it as a postgresql:// URL, or name a service"
            f" with postgresql://?service=NAME): give {FORMS}"
        )
    raise InvalidArgument(f"unsupported store URL {scheme.group(0)}…: give {FORMS}")


def _one(name: str, values: list[str]) -> str | None:
    if len(values) > 1:
        raise InvalidArgument(f"{name} given {len(values)} times in the store URL")
    return values[0] if values else None


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 86_400:
        raise InvalidArgument(
            f"{COMMIT_TIMEOUT_PARAM} in the store URL must be a number of seconds above 0 and"
            " below 86400"
        )
    return seconds


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_PARTITIONS:
        raise InvalidArgument(
            f"{PARTITIONS_PARAM} in the store URL must be a whole number from 1 to {MAX_PARTITIONS}"
        )
    return int(value)


def _truth(value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() not in _TRUTH:
        raise InvalidArgument(f"{REQUIRE_SYNC_PARAM} in the store URL must be true or false")
    return _TRUTH[value.lower()]


def _sqlite_path(path: str) -> str:
    if not path:
        raise InvalidArgument(f"the store URL names no file: give {FORMS}")
    if path in _IN_MEMORY or "mode=memory" in path or path.startswith("file:"):
        raise InvalidArgument(
            "a ctrlrun store is a file: an in-memory database would lose every reservation,"
            " approval and receipt when the process exits; give sqlite:///path/to/state.db"
        )
    return path


def _check_escapes(url: str) -> None:
    """Refuse a ``%`` that does not start a two-digit escape: the driver's own error would
    quote the text around it, which may be a password."""
    if _BAD_ESCAPE.search(url):
        where = "password or user" if _BAD_ESCAPE.search(_userinfo(url)) else "URL"
        raise InvalidArgument(
            f"the store URL's {where} has a '%' that does not start a %XX escape: write a"
            " literal '%' as %25 (the URL is not shown: it may hold a password)"
        )


def _userinfo(url: str) -> str:
    return _authority(url.split("://", 1)[1]).rpartition("@")[0]


def split_param(url: str, name: str) -> tuple[str, list[str]]:
    """``url`` without its query parameters called ``name`` (every other byte as written), and
    their decoded values in order."""
    base, mark, rest = url.partition("?")
    if not mark:
        return url, []
    query, hash_mark, fragment = rest.partition("#")
    kept, values = [], []
    for piece in query.split("&"):
        key, _, value = piece.partition("=")
        if unquote(key, errors="replace") != name:
            kept.append(piece)
            continue
        try:
            values.append(unquote(value, errors="strict"))
        except UnicodeDecodeError:
            raise InvalidArgument(f"{name} in the store URL is not UTF-8") from None
    tail = "?" + "&".join(kept) if kept else ""
    return base + tail + hash_mark + fragment, values


def with_param(url: str, name: str, value: str) -> str:
    """``url`` with the query parameter ``name`` set to ``value`` (any earlier one removed,
    every other byte as written)."""
    base, _ = split_param(url, name)
    head, hash_mark, fragment = base.partition("#")
    joiner = "&" if "?" in head else "?"
    return f"{head}{joiner}{quote(name, safe='')}={quote(value, safe='')}{hash_mark}{fragment}"


def redacted(url: str) -> str:
    """``url`` for printing: the password in its user info and any ``password`` or
    ``sslpassword`` query parameter shown as ``***``; a string that is not a URL at all is
    not shown."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return "<not a URL>"
    rest = url[scheme.end() :]
    authority = _authority(rest)
    userinfo, at, host = authority.rpartition("@")
    shown = f"{userinfo.split(':', 1)[0]}:***@{host}" if at and ":" in userinfo else authority
    return _redact_query(scheme.group(0) + shown + rest[len(authority) :])


def _authority(rest: str) -> str:
    """The authority part of a URL after its ``scheme://``."""
    return re.split(r"[/?#]", rest, maxsplit=1)[0]


def _redact_query(url: str) -> str:
    base, mark, rest = url.partition("?")
    if not mark:
        return url
    query, hash_mark, fragment = rest.partition("#")
    pieces = []
    for piece in query.split("&"):
        key, eq, _ = piece.partition("=")
        secret = unquote(key).lower() in SECRET_PARAMS
        pieces.append(f"{key}{eq}***" if secret and eq else piece)
    return base + mark + "&".join(pieces) + hash_mark + fragment
