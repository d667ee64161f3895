"""Suite-wide pytest configuration: the real-Postgres fixtures (see tests/support/), and
pytester, which the fixtures' own self-tests use to run an inner pytest session."""

pytest_plugins = ["support.pg_fixtures", "pytester"]
