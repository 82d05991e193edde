"""BatchScope's continuous-batching engine: scheduler, paged KV cache, model runner, LLMEngine.

Never imports Qt. The scheduler, the block pool, requests and outputs never import torch.
"""
