"""transformers' own forward pass with our paged attention plugged in (its attention-function
registry, :mod:`engine.runner.attention.registry`): any architecture whose attention goes through
that registry runs, and it is the reference the engine's own forward is tested against."""
from __future__ import annotations

import torch

from engine.runner.attention import ATTN_IMPLEMENTATION, register_paged_attention


class TransformersForward:
    """The forward of a transformers causal LM ``model`` (eval mode, on its device), whose attention
    implementation is switched to ours here. Same interface as
    :class:`engine.runner.forward.llama.LlamaForward`."""

    name = "transformers"

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.config = model.config
        self.hidden_size = model.config.hidden_size
        model.set_attn_implementation(register_paged_attention())
        assert model.config._attn_implementation == ATTN_IMPLEMENTATION
        first = next(model.parameters())
        # A 4-D attention_mask makes transformers' create_causal_mask return it as it is, skipping its
        # packed-sequence check on position_ids (an .all(): a device-to-host sync every step). Our
        # attention masks from the block tables and ignores it.
        self._placeholder_mask = torch.zeros(1, 1, 1, 1, dtype=first.dtype, device=first.device)

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, meta) -> torch.Tensor:
        """The final hidden states ``[T, hidden_size]`` of the step's flat tokens (``input_ids``,
        ``positions`` int64 ``[T]``; ``meta`` the step's attention metadata, handed to our
        attention as the ``paged_meta`` keyword), run as one sequence of ``T`` tokens."""
        out = self.model.model(input_ids=input_ids[None], position_ids=positions[None], use_cache=False,
                               attention_mask=self._placeholder_mask, paged_meta=meta)
        return out.last_hidden_state[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's LM head over ``hidden`` ``[S, hidden_size]``: ``[S, vocab_size]``."""
        return self.model.lm_head(hidden)
