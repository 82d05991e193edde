"""The window's step views: KV block map, slot timeline, queue tables, metrics plots, and their drawing parts."""
