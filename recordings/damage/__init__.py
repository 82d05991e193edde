"""Damaged recordings: what SQLite says is broken, which steps still read, and copying the readable part out."""
