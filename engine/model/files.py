"""What a model folder holds, checked without torch: config.json, model type, weight files, hashes.

Shared by ``model_loader`` (resolve and load) and ``gguf_convert`` (the cached default model).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class ModelLoadError(RuntimeError):
    """A model could not be found, converted or loaded. The message names the path and the problem."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model's transformers folder is, and which weights it holds (provenance for recordings).

    ``weight_file_hash`` is the sha256 hex of the weights: of the GGUF file for the built-in model,
    of the weight files for a local folder (see ``weights_hash``).
    """

    name: str
    folder: Path
    weight_file_hash: str
    is_default: bool


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of one file's bytes (the same as ``sha256sum``). Raises ``OSError``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def weight_files(folder: str | Path) -> list[Path]:
    """The weight files of a transformers folder (``*.safetensors``, else ``pytorch_model*.bin``),
    sorted by name; empty if there are none."""
    folder = Path(folder)
    for pattern in WEIGHT_PATTERNS:
        found = sorted(p for p in folder.glob(pattern) if p.is_file())
        if found:
            return found
    return []


def weights_hash(folder: str | Path) -> str:
    """sha256 hex identifying the weights in ``folder``.

    One weight file: that file's sha256 (so it matches ``sha256sum model.safetensors``). Several
    (sharded): the sha256 of the ``sha256sum``-style manifest, one ``"<hex>  <name>\\n"`` line per
    file in name order. Reads every byte, so a multi-GB model takes seconds.
    Raises ``ModelLoadError`` if the folder has no weight files or one cannot be read.
    """
    folder = Path(folder)
    files = weight_files(folder)
    if not files:
        raise ModelLoadError(
            f"{folder}: no weight files found (expected {' or '.join(WEIGHT_PATTERNS)})")
    try:
        digests = [(file_sha256(p), p.name) for p in files]
    except OSError as e:
        raise ModelLoadError(f"{folder}: cannot read a weight file: {e}") from e
    if len(digests) == 1:
        return digests[0][0]
    manifest = "".join(f"{hex_}  {name}\n" for hex_, name in digests)
    return hashlib.sha256(manifest.encode()).hexdigest()


def read_model_config(folder: str | Path) -> dict:
    """Read ``folder/config.json`` and check that its ``model_type`` is one we support.

    Returns the parsed config. Raises ``ModelLoadError`` naming the path when the folder is missing,
    config.json is missing or is not a JSON object, or the model type is unsupported.
    """
    folder = Path(folder)
    if not folder.exists():
        raise ModelLoadError(f"{folder}: model folder does not exist")
    if not folder.is_dir():
        raise ModelLoadError(f"{folder}: not a folder (expected a transformers model folder)")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(
            f"{folder}: no config.json (expected a transformers model folder, as written by "
            f"save_pretrained)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{config_path}: cannot read config.json: {e}") from e
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_path}: config.json is not a JSON object")
    check_model_type(config.get("model_type"), folder)
    return config


def check_model_type(model_type: object, where: str | Path) -> None:
    """Raise ``ModelLoadError`` unless ``model_type`` is a supported (Llama-family) architecture."""
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"{where}: unsupported model_type {model_type!r}; BatchScope supports Llama-family "
            f"models only: {', '.join(SUPPORTED_MODEL_TYPES)}")


def has_tokenizer(folder: str | Path) -> bool:
    """True if ``folder`` holds any tokenizer file (a tiny test model has none)."""
    return any((Path(folder) / name).is_file() for name in TOKENIZER_FILES)
