"""Checking a recording end to end: the scheduler cases' global invariants on every state, and ``batchscope check``."""
