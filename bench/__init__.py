"""Benchmarks (``make bench``); results go to ``bench/RESULTS.md``."""
