"""Paged attention: step metadata, the torch reference implementation, and its registration with
transformers' attention-function registry."""
from engine.runner.attention.metadata import PagedAttentionMetadata
from engine.runner.attention.registry import ATTN_IMPLEMENTATION, register_paged_attention

__all__ = ["PagedAttentionMetadata", "ATTN_IMPLEMENTATION", "register_paged_attention"]
