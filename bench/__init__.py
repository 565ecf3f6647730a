"""Benchmarks: measured figures printed and written as JSON, compared against a reference in the same run."""
