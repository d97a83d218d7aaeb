"""Benchmarks of Hookline, run against private Redis servers: ``python -m bench.gates``."""
