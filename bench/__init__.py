"""Benchmarks (`make bench`): each comparison runs side by side in one process tree; see bench/run.py."""
