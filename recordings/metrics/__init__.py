"""Metrics recomputed from a recording's rows: run summary, serving metrics, wall-clock facts, roofline efficiency."""
