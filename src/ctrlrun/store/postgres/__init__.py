"""The Postgres state store, in small parts. The public entry is ``ctrlrun.postgres``.

``names``, ``skew``, ``witness`` and ``store`` import no driver; every module that needs
psycopg is imported only once a store is constructed, so ``import ctrlrun`` (and
``import ctrlrun.postgres``) never loads it.

* ``names``: the schema name check and the driver loader (``MissingDependency``).
* ``sqltext``: the named queries and migrations, composed with the schema identifier.
* ``connections``: one autocommit connection per thread and per process.
* ``txn``: the ``Txn`` a write runs in: the server's clock, deferred statements, witnesses.
* ``witness``: what a write left behind, and how a re-read recognises it.
* ``engine``: one write transaction, the two failure rows, and the lost-COMMIT recovery.
* ``folded``: a protected call's two transactions, each sent as one message (decision 0006).
* ``atopen``: the checks at open and the migrations.
* ``skew``: measuring the application clock against the server's.
* ``store``: ``PostgresStateStore``, the ``StateStore`` protocol over the parts above.
"""
