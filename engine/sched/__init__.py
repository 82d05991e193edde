"""The scheduler: which requests run each step, under the token budget and the batch-slot cap. Pure Python, no torch."""
