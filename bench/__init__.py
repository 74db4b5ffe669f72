"""Benchmarks, each a ratio against a bare baseline measured in the same run (DESIGN.md §11)."""
