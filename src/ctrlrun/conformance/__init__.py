"""Proofs a user can run: ``ctrlrun.conformance.store`` grades a state store.

Nothing here is imported by ``import ctrlrun``.
"""
