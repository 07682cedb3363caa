"""The shipped simulation of every verdict rule, one module per rule (benchmarks/verdict_calibration.py runs them)."""
