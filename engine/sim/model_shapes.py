"""Transformer shapes for the cost model: the few numbers of a ``config.json`` that set FLOPs and bytes.

Built-in shapes are copied from the public Hugging Face ``config.json`` of each model:
``HuggingFaceTB/SmolLM2-135M-Instruct``, ``meta-llama/Llama-3.2-1B``, ``meta-llama/Llama-3.1-8B``,
``Qwen/Qwen2.5-7B``. Any local transformers folder (or its ``config.json``) loads too.
Biases (Qwen2's QKV bias) and norm weights are left out: under 0.1% of the parameters.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only Llama-family transformer: ``num_hidden_layers`` blocks of GQA attention
    (``num_attention_heads`` query heads, ``num_key_value_heads`` K/V heads of ``head_dim``) and a
    gated MLP (gate, up: hidden -> intermediate; down: intermediate -> hidden). ``bytes_per_param``
    is the size of one weight, activation or K/V element (bf16 = 2, fp32 = 4).
    ``max_model_len`` is the longest sequence (prompt + output tokens) the config allows, derived as
    vLLM derives it (:func:`derived_max_model_len`); None when the config says nothing."""

    name: str
    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    bytes_per_param: int = 2
    tie_word_embeddings: bool = False
    max_model_len: int | None = None

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of K (or of V) per token and layer: ``num_key_value_heads * head_dim``."""
        return self.num_key_value_heads * self.head_dim

    @property
    def qkv_params(self) -> int:
        return self.hidden_size * (self.q_size + 2 * self.kv_size)

    @property
    def o_params(self) -> int:
        return self.q_size * self.hidden_size

    @property
    def mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def lm_head_params(self) -> int:
        return self.hidden_size * self.vocab_size

    @property
    def num_parameters(self) -> int:
        """Weights in total (embedding counted once when tied to the LM head)."""
        per_layer = self.qkv_params + self.o_params + self.mlp_params
        embeddings = self.lm_head_params * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * per_layer + embeddings

    @property
    def weight_bytes(self) -> int:
        return self.num_parameters * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token across all layers, in bytes."""
        return 2 * self.num_hidden_layers * self.kv_size * self.bytes_per_param

    def with_dtype(self, dtype: str) -> "ModelShape":
        """The same shape in ``dtype`` (float32, bfloat16, float16)."""
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        return dataclasses.replace(self, bytes_per_param=DTYPE_BYTES[dtype])

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, cfg: dict, name: str) -> "ModelShape":
        """From a transformers config dict (Llama, Mistral, Qwen2, Qwen3 keys)."""
        try:
            heads = int(cfg["num_attention_heads"])
            dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
            return cls(name=name, num_hidden_layers=int(cfg["num_hidden_layers"]),
                       hidden_size=int(cfg["hidden_size"]), intermediate_size=int(cfg["intermediate_size"]),
                       num_attention_heads=heads, num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                       head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
                       vocab_size=int(cfg["vocab_size"]), bytes_per_param=DTYPE_BYTES.get(str(dtype), 2),
                       tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                       max_model_len=derived_max_model_len(cfg))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{name}: not a Llama-family transformers config ({type(e).__name__}: {e})") from e


# Config keys that bound the sequence length, in the order vLLM reads them (ModelConfig's
# ``_get_and_verify_max_len``: the smallest one present wins).
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3")   # their max_position_embeddings is the scaled length


def derived_max_model_len(cfg: dict) -> int | None:
    """The longest sequence a transformers ``config.json`` (as a dict) allows, as vLLM derives its
    default ``max_model_len``: the smallest of :data:`MAX_LEN_KEYS` present, times the RoPE scaling
    ``factor`` unless the rope type already counts it (``llama3``, ``longrope``, ``su``; for ``yarn``
    the base is ``original_max_position_embeddings``). None when no key is present (vLLM then
    assumes 2048). Source: vLLM, ``vllm/config`` ``_get_and_verify_max_len``."""
    lengths = [cfg[k] for k in MAX_LEN_KEYS
               if isinstance(cfg.get(k), (int, float)) and not isinstance(cfg.get(k), bool) and cfg[k] > 0]
    if not lengths:
        return None
    length = float(min(lengths))
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, dict):
        kind = rope.get("rope_type") or rope.get("type") or "default"
        if kind not in UNSCALED_ROPE_TYPES and isinstance(rope.get("factor"), (int, float)):
            if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), (int, float)):
                length = float(rope["original_max_position_embeddings"])
            length *= rope["factor"]
    return int(length)


# max_model_len: each config's max_position_embeddings (Llama 3.x's llama3 rope scaling is counted in
# it already; Qwen2.5-7B base says 131,072, its -Instruct config 32,768).
MODELS: dict[str, ModelShape] = {s.name: s for s in (
    ModelShape("smollm2-135m", 30, 576, 1536, 9, 3, 64, 49152, tie_word_embeddings=True, max_model_len=8192),
    ModelShape("llama-3.2-1b", 16, 2048, 8192, 32, 8, 64, 128256, tie_word_embeddings=True,
               max_model_len=131072),
    ModelShape("llama-3.1-8b", 32, 4096, 14336, 32, 8, 128, 128256, max_model_len=131072),
    ModelShape("qwen2.5-7b", 28, 3584, 18944, 28, 4, 128, 152064, max_model_len=131072),
)}
ALIASES = {"default": "smollm2-135m"}   # the engine's embedded model


def _canonical(name: str) -> str:
    key = name.strip().lower().rsplit("/", 1)[-1]
    for suffix in ("-instruct", "-it"):
        key = key.removesuffix(suffix)
    return ALIASES.get(key, key)


def known_models() -> list[str]:
    return sorted(MODELS)


def get_model_shape(spec: str) -> ModelShape:
    """The shape named ``spec`` (case-insensitive; an ``org/`` prefix and ``-Instruct`` suffix are
    ignored, ``default`` = SmolLM2-135M) or read from a local ``config.json`` / model folder.
    Raises ``ValueError`` naming the known models."""
    key = _canonical(spec)
    if key in MODELS:
        return MODELS[key]
    path = Path(spec).expanduser()
    file = path / "config.json" if path.is_dir() else path
    if file.is_file():
        try:
            cfg = json.loads(file.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{file}: cannot read model config: {e}") from e
        if not isinstance(cfg, dict):
            raise ValueError(f"{file}: not a transformers config (expected a JSON object)")
        return ModelShape.from_config(cfg, path.name if path.is_dir() else path.parent.name or file.name)
    raise ValueError(f"unknown sim model {spec!r}: known models are {', '.join(known_models())} "
                     f"(or the path of a transformers folder / config.json)")
