"""Workloads: trace importers (Azure CSV, Mooncake JSONL, our JSONL), Poisson arrivals, length tables, prefix blocks, and turning rows into requests."""
