"""The Postgres state store: ``from ctrlrun.postgres import PostgresStateStore``.

Install the ``postgres`` extra (psycopg 3): ``pip install '.[postgres]'`` in the checkout.
Importing this module loads no driver; constructing a store does, and raises
``MissingDependency`` naming that install line when it is absent. See ``docs/postgres.md`` for
what to grant, pooling, failover, and what the store does not do.
"""

from ctrlrun.store.postgres.skew import ClockSkew
from ctrlrun.store.postgres.store import PostgresStateStore

__all__ = ["ClockSkew", "PostgresStateStore"]
