"""The engine's own forward pass for the Llama family (Llama, SmolLM2, Mistral, Qwen2, Qwen3), over
a flat token batch and the paged KV cache, on the weights of a loaded transformers model.

Per decoder layer: fused residual add + RMSNorm, ONE matmul for Q, K and V (their weights
concatenated, biases too for Qwen2), per-head RMSNorm of Q and K (Qwen3), RoPE on the query and
key heads together from a precomputed cos/sin table, the engine's paged attention
(:func:`engine.runner.attention.registry.attend`: the torch reference on the CPU, our Triton
kernels on CUDA, the static decode path under CUDA graphs), the output projection, fused residual
add + RMSNorm, ONE matmul for gate and up, SiLU(gate) * up, the down projection. The token batch
is ``[T, hidden]`` with no batch dimension and no padding (vLLM's model runner does the same).

Structure after vLLM's ``vllm/model_executor/models/llama.py`` (``QKVParallelLinear``,
``MergedColumnParallelLinear``, ``RMSNorm(x, residual)``, ``get_rope``), written here for one
device and our attention. Llama: Touvron et al. 2023; SwiGLU: Shazeer 2020.

The concatenated weights are made once and the transformers model's own ``q_proj`` / ``k_proj`` /
``v_proj`` and ``gate_proj`` / ``up_proj`` parameters become views of them: no weight is held
twice, and the transformers model stays usable as the reference forward.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.runner.attention.registry import attend
from engine.runner.forward.layers import add_rms_norm, apply_rope, rms_norm, rope_table
from engine.runner.forward.triton_layers import add_rms_norm_triton, apply_rope_triton, fused_kernels_selected

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")   # cos/sin depend on the position alone


class UnsupportedModel(ValueError):
    """The model's architecture or options are outside what :class:`LlamaForward` implements; the
    message names the problem (the transformers forward still runs it)."""


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why :class:`LlamaForward` cannot run ``model`` (a transformers causal LM), or ``None`` when
    it can: a model type outside :data:`SUPPORTED_MODEL_TYPES`, an activation other than SiLU, a
    RoPE variant whose tables change with the sequence length, or decoder layers shaped otherwise."""
    cfg = model.config
    model_type = getattr(cfg, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    act = getattr(cfg, "hidden_act", "silu")
    if act != "silu":
        return f"hidden_act {act!r} (only 'silu')"
    rope_type = getattr(getattr(model.model, "rotary_emb", None), "rope_type", None)
    if rope_type not in STATIC_ROPE_TYPES:
        return f"RoPE type {rope_type!r} is not one of {STATIC_ROPE_TYPES}"
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) or \
                not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
            return f"decoder layer {type(layer).__name__} is not shaped like LlamaDecoderLayer"
    return None


@dataclass
class _Layer:
    """One decoder layer's weights (shapes for ``H`` query heads, ``Hkv`` KV heads of ``D`` dims,
    ``n`` hidden, ``I`` intermediate): ``qkv`` ``[(H + 2 Hkv) D, n]``, ``o`` ``[n, H D]``, ``gate_up``
    ``[2 I, n]``, ``down`` ``[n, I]``, their optional biases, the two RMSNorm weights ``[n]`` and
    Qwen3's per-head Q/K RMSNorm weights ``[D]``."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None


def fuse_linears(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One ``[sum(out_features), in_features]`` weight (and bias, when the layers have biases)
    from ``linears`` stacked along their outputs; each layer's own parameters become views of the
    stacked tensors, so the memory is held once. Raises ``ValueError`` when some have a bias and
    others not, or their input sizes differ."""
    if len({lin.in_features for lin in linears}) != 1:
        raise ValueError(f"cannot stack linears of input sizes {[lin.in_features for lin in linears]}")
    biased = [lin.bias is not None for lin in linears]
    if any(biased) and not all(biased):
        raise ValueError("cannot stack linears of which only some have a bias")
    weight = torch.cat([lin.weight.detach() for lin in linears])
    bias = torch.cat([lin.bias.detach() for lin in linears]) if all(biased) else None
    start = 0
    for lin in linears:
        end = start + lin.out_features
        lin.weight = torch.nn.Parameter(weight[start:end], requires_grad=False)
        if bias is not None:
            lin.bias = torch.nn.Parameter(bias[start:end], requires_grad=False)
        start = end
    return weight, bias


def _detached(p: torch.nn.Parameter | None) -> torch.Tensor | None:
    return None if p is None else p.detach()


class LlamaForward:
    """The engine's forward pass over a transformers Llama-family ``model`` (eval mode, on its
    device, in its dtype; see :func:`unsupported_reason`).

    :meth:`hidden_states` runs the decoder over one step's flat token batch and
    :meth:`compute_logits` the LM head (tied or not). The residual add + RMSNorm and the RoPE run
    as one Triton kernel each (:mod:`engine.runner.forward.triton_layers`) when ``fused_kernels``
    (default: on CUDA when triton imports, see ``fused_kernels_selected``), else as torch ops
    (:mod:`engine.runner.forward.layers`). Raises :class:`UnsupportedModel` for a model it cannot run. Memory: the RoPE table (``max_position_embeddings * head_dim`` values in the
    model's dtype); the weights are shared with ``model`` (see :func:`fuse_linears`).
    """

    name = "batchscope"

    def __init__(self, model: torch.nn.Module, fused_kernels: bool | None = None) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise UnsupportedModel(f"the batchscope forward cannot run this model: {reason}")
        cfg = model.config
        self.config = cfg
        self.hidden_size = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim ** -0.5
        self.eps = cfg.rms_norm_eps
        first = next(model.parameters())
        self.embed = model.model.embed_tokens.weight.detach()
        self.norm = model.model.norm.weight.detach()
        self.lm_head = model.lm_head.weight.detach()
        self.rope = rope_table(model.model.rotary_emb, cfg.max_position_embeddings, first.dtype, first.device)
        self.layers = [self._layer(layer) for layer in model.model.layers]
        self.fused_kernels = fused_kernels_selected(first.device) if fused_kernels is None else fused_kernels
        if self.fused_kernels:
            self._warm_up()

    def _warm_up(self) -> None:
        """Compile the fused kernels' variants now (with and without a residual, RoPE over the
        query and key heads) on a two-token batch laid out as a step lays it out, so no timed step
        compiles (their constants depend on the model only)."""
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = torch.zeros(2, self.hidden_size, dtype=self.embed.dtype, device=self.embed.device)
        self._add_norm(*self._add_norm(x, None, self.norm), self.norm)
        qkv = torch.zeros(2, (h + 2 * hkv) * d, dtype=x.dtype, device=x.device)
        apply_rope_triton(qkv[:, :(h + hkv) * d].view(2, h + hkv, d), self.rope,
                          torch.zeros(2, dtype=torch.long, device=x.device))

    @staticmethod
    def _layer(layer: torch.nn.Module) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        qkv, qkv_bias = fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj])
        gate_up, gate_up_bias = fuse_linears([mlp.gate_proj, mlp.up_proj])
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        return _Layer(qkv=qkv, qkv_bias=qkv_bias, o=attn.o_proj.weight.detach(), o_bias=_detached(attn.o_proj.bias),
                      gate_up=gate_up, gate_up_bias=gate_up_bias, down=mlp.down_proj.weight.detach(),
                      down_bias=_detached(mlp.down_proj.bias),
                      input_norm=layer.input_layernorm.weight.detach(),
                      post_norm=layer.post_attention_layernorm.weight.detach(),
                      q_norm=None if q_norm is None else q_norm.weight.detach(),
                      k_norm=None if k_norm is None else k_norm.weight.detach())

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, meta) -> torch.Tensor:
        """The final (normed) hidden states ``[T, hidden_size]`` in the model's dtype of the step's
        ``T`` tokens: ``input_ids`` and ``positions`` int64 ``[T]`` on the model's device, ``meta``
        the step's attention metadata (``PagedAttentionMetadata``, or ``StaticDecodeMetadata`` for a
        padded decode batch), whose KV caches receive every layer's new K/V. No host sync."""
        h = F.embedding(input_ids, self.embed)
        rope = positions if self.fused_kernels else self.rope.index_select(0, positions)
        residual = None
        for i, layer in enumerate(self.layers):
            x, residual = self._add_norm(h, residual, layer.input_norm)
            h = self._attention(x, rope, meta, i, layer)
            x, residual = self._add_norm(h, residual, layer.post_norm)
            h = self._mlp(x, layer)
        return self._add_norm(h, residual, self.norm)[0]

    def _add_norm(self, x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(RMSNorm(x + residual), x + residual)``; ``residual`` None (the first layer): of ``x``."""
        if self.fused_kernels:
            return add_rms_norm_triton(x, residual, weight, self.eps)
        if residual is None:
            return rms_norm(x, weight, self.eps), x
        return add_rms_norm(x, residual, weight, self.eps)

    def _attention(self, x: torch.Tensor, rope: torch.Tensor, meta, layer_idx: int, layer: _Layer) -> torch.Tensor:
        """``rope``: the step's positions (int64 ``[T]``) with the fused kernels, else their rows
        of the cos/sin table (``[T, head_dim]``)."""
        t = x.shape[0]
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = F.linear(x, layer.qkv, layer.qkv_bias)                       # [T, (H + 2 Hkv) D]
        qk = qkv[:, :(h + hkv) * d].view(t, h + hkv, d)
        if layer.q_norm is not None:                                        # Qwen3: per-head RMSNorm
            qk = torch.cat((rms_norm(qk[:, :h], layer.q_norm, self.eps),
                            rms_norm(qk[:, h:], layer.k_norm, self.eps)), dim=1)
        qk = apply_rope_triton(qk, self.rope, rope) if self.fused_kernels else apply_rope(qk, rope)   # [T, H + Hkv, D]
        v = qkv[:, (h + hkv) * d:].view(t, hkv, d)
        out = attend(qk[:, :h].transpose(0, 1)[None], qk[:, h:].transpose(0, 1)[None],
                     v.transpose(0, 1)[None], meta, layer_idx, self.scale)  # [1, T, H, D]
        return F.linear(out[0].reshape(t, h * d), layer.o, layer.o_bias)

    @staticmethod
    def _mlp(x: torch.Tensor, layer: _Layer) -> torch.Tensor:
        gate, up = F.linear(x, layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, layer.down, layer.down_bias)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head: logits ``[S, vocab_size]`` in the model's dtype of hidden states
        ``[S, hidden_size]``."""
        return F.linear(hidden, self.lm_head)
