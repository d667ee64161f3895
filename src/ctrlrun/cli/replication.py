"""The replication line of ``ctrlrun verify`` and ``ctrlrun conformance`` on Postgres: what a
COMMIT on that server waits for, so a report of passed guarantees also says whether they
survive a failover (docs/postgres.md, "Failover")."""

from __future__ import annotations

import json
from typing import Any

from ctrlrun.store.url import parse_store_url


def replication_of(store_url: str | None) -> dict[str, Any] | None:
    """For a ``postgresql://`` URL, the server's replication (``Replication.to_dict`` plus a
    one-line ``summary``) or ``{"unreadable": why}``; None for any other store."""
    if not store_url or not store_url.startswith(("postgresql://", "postgres://")):
        return None
    try:
        import psycopg

        from ctrlrun.store.postgres.replication import probe

        seen = probe(parse_store_url(store_url).target)
    except (ImportError, psycopg.Error) as exc:
        return {
            "unreadable": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        }
    return {**seen.to_dict(), "summary": seen.describe()}


def text_line(replication: dict[str, Any]) -> str:
    """The report's line: ``replication: <summary>``."""
    if "unreadable" in replication:
        return f"replication: could not be read ({replication['unreadable']})"
    return f"replication: {replication['summary']}"


def with_replication(report_json: str, replication: dict[str, Any]) -> str:
    """The report's JSON with a ``replication`` key added."""
    document = json.loads(report_json)
    document["replication"] = replication
    return json.dumps(document, indent=2, ensure_ascii=False, default=str)
