"""Comparing recorded runs of one workload: headline ratios, per-request changes, fairness."""
