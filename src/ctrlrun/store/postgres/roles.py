"""The three roles of a Postgres store (decision 0024): the grants ``ctrlrun grants`` prints
or applies.

* the **owner** (the role the script runs as): it alone migrates, and owns every table and
  function; nothing here changes what it holds;
* the **agent**'s role: ``USAGE`` on the schema, ``SELECT`` on what a call reads, ``EXECUTE``
  on the functions a protected call writes through — no ``INSERT``, ``UPDATE``, ``DELETE``,
  ``TRUNCATE`` or ``CREATE`` anywhere in the schema;
* the **approver**'s (operator's) role: ``SELECT`` on every table, ``EXECUTE`` on the
  functions that answer, resolve and accept.

The statements live in ``sql/postgres/roles/grants.sql``; the schema and the two role names
are composed into them as identifiers (``psycopg.sql.Identifier``), never as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

from ctrlrun.errors import InvalidArgument, StoreError
from ctrlrun.store.postgres.names import check_schema_name, load_driver
from ctrlrun.store.queries import parse_queries

SECTIONS: Final = (
    ("roles_reset", "start from nothing: what either role held in the schema is taken away"),
    ("roles_agent", "the agent's role: protected calls, through the schema's functions only"),
    ("roles_approver", "the approver's role: reads what it shows, answers through functions"),
)
_MAX_NAME: Final = 63  # Postgres identifiers: NAMEDATALEN - 1 bytes

AGENT_FUNCTIONS: Final = (
    "ctrlrun_reserve_templated",
    "ctrlrun_finish_effect",
    "ctrlrun_record_receipt",
    "ctrlrun_append_events",
    "ctrlrun_insert_effect",
    "ctrlrun_renew_effect",
    "ctrlrun_move_effect",
    "ctrlrun_record_template",
    "ctrlrun_request_approval",
    "ctrlrun_consume_approval",
    "ctrlrun_expire_approval",
    "ctrlrun_enqueue_outbox",
    "ctrlrun_consume_budget",
    "ctrlrun_charge_budget",
    "ctrlrun_return_budget",
)
"""The functions ``roles_agent`` grants (a test holds the two lists equal); an agent's role
lacking one is refused at open."""


@cache
def _statements() -> dict[str, str]:
    text = resources.files("ctrlrun.store").joinpath("sql", "postgres", "roles", "grants.sql")
    return parse_queries(text.read_text(encoding="utf-8"))


def check_role_name(name: str, what: str) -> str:
    """``name`` if Postgres can name a role by it (non-empty, at most 63 bytes, no control
    character); ``InvalidArgument`` otherwise. It is always quoted as an identifier."""
    if (
        not isinstance(name, str)
        or not name
        or len(name.encode("utf-8", "surrogatepass")) > _MAX_NAME
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)
    ):
        raise InvalidArgument(
            f"the {what} role must be a role name: 1 to {_MAX_NAME} bytes, no control character"
        )
    return name


@dataclass(frozen=True, slots=True)
class Roles:
    """The schema and the two roles the grants name (the owner is whoever runs them)."""

    schema: str
    agent: str
    approver: str

    def __post_init__(self) -> None:
        check_schema_name(self.schema)
        check_role_name(self.agent, "agent")
        check_role_name(self.approver, "approver")
        if self.agent == self.approver:
            raise InvalidArgument(
                "the agent's role and the approver's role must differ: an agent that can"
                " answer its own requests needs no approval"
            )

    def statements(self) -> list[tuple[str, str]]:
        """``(section comment, composed SQL)`` per section, in order."""
        load_driver()
        from psycopg import sql

        names = {
            "schema": sql.Identifier(self.schema),
            "agent": sql.Identifier(self.agent),
            "approver": sql.Identifier(self.approver),
        }
        texts = _statements()
        return [
            (comment, sql.SQL(texts[name]).format(**names).as_string(None))
            for name, comment in SECTIONS
        ]

    def script(self) -> str:
        """The whole script, for a person to read or pipe to ``psql`` (one transaction)."""
        lines = ["BEGIN;"]
        for comment, text in self.statements():
            lines += ["", f"-- {comment}", text.rstrip().rstrip(";") + ";"]
        return "\n".join([*lines, "", "COMMIT;", ""])


def apply_grants(url: str, roles: Roles) -> str:
    """Run the grants on ``url`` in one transaction, as the role the URL names (the owner);
    return that role's name. ``StoreError`` (the URL never shown) when the server refuses:
    a role that does not exist, or a connecting role that may not grant."""
    psycopg = load_driver()
    try:
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
            owner = str(conn.info.user)
            if owner in {roles.agent, roles.approver}:
                raise InvalidArgument(
                    f"the grants are applied as the store's owner, and {owner!r} is named as"
                    " the agent's or the approver's role: the roles must be three"
                )
            with conn.transaction():
                for _comment, text in roles.statements():
                    conn.execute(text)
                if not _took(conn, roles):
                    raise StoreError(_NOT_OWNER.format(schema=roles.schema, owner=owner))
    except psycopg.Error as exc:
        raise StoreError(
            f"granting the roles on schema {roles.schema!r} failed, nothing was granted: {exc}"
        ) from exc
    return owner


_NOT_OWNER: Final = (
    "the grants did not take on schema {schema!r}, nothing was granted: role {owner!r} does not"
    " own the schema and its objects (a GRANT by another role only warns). Give the schema to"
    " the owner (ALTER SCHEMA … OWNER TO …, or CREATE SCHEMA … AUTHORIZATION …), let it"
    " create the store, and apply the grants as that role"
)


def _took(conn: Any, roles: Roles) -> bool:
    params = {"agent": roles.agent, "approver": roles.approver, "schema": roles.schema}
    row = conn.execute(_statements()["roles_took"], params).fetchone()
    return bool(row and row[0])
