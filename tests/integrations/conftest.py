"""Adapter tests run against the real stores, as the runtime tests do: the same fixtures."""

from runtime.conftest import backend, clock, store  # noqa: F401 - fixtures, by name
