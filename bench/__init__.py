"""Benchmarks, each a ratio against a bare baseline measured in the same run (docs/bench.md)."""
