"""Paged KV-cache bookkeeping: the block pool, per-request block tables, prefix hashing, the CPU swap space. Pure Python, no torch."""
