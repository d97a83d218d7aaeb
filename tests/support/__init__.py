"""Helpers the test tiers share, written once: the CLI runner, endpoint factories and waits,
and request-window counting. (Fixtures live in tests/conftest.py.)"""
