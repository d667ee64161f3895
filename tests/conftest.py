"""Suite-wide pytest configuration: the real-Postgres fixtures (see tests/support/)."""

pytest_plugins = ["support.pg_fixtures"]
