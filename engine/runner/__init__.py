"""The model runner: one packed forward pass per step over a paged KV tensor, sampling, CUDA graphs, attention kernels."""
