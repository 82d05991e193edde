"""The provenance the app builds (``app.factory``: a model run and a simulated run, recorded through
``app.llm.LLM``) is stored with the keys, in the order, that recordings have always held, and
reads back through ``engine.run_info.RunInfo`` as the same JSON text."""
from __future__ import annotations

import json
import sqlite3

import pytest

from app.llm import LLM
from engine.request import SamplingParams
from engine.run_info import RunInfo
from recordings.file import codec
from recordings.file.open_reader import open_reader

# the keys of runs.run_info_json, in order, as app.factory wrote them before RunInfo existed
MODEL_RUN_KEYS = ["config", "model", "device", "device_name", "torch_threads", "dtype", "versions", "seed",
                  "trace", "started_at", "roofline", "source"]
SIM_RUN_KEYS = ["config", "executor", "simulated", "model", "device", "device_name", "dtype", "sim", "versions",
                "seed", "trace", "started_at", "source"]


@pytest.mark.parametrize("kind", ["model", "sim"])
def test_a_recorded_runs_info_has_todays_keys_and_reads_back_as_the_same_text(kind, tiny_model, tmp_path,
                                                                              one_torch_thread):
    if kind == "model":
        llm, keys = LLM(tiny_model, device="cpu", num_gpu_blocks=16, max_num_seqs=2), MODEL_RUN_KEYS
    else:
        llm, keys = LLM("llama-3.2-1b", executor="sim", sim_device="h100", num_gpu_blocks=64), SIM_RUN_KEYS
    path = tmp_path / f"{kind}.sqlite"
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, ignore_eos=True), record=path, use_tqdm=False)
    with sqlite3.connect(path) as db:
        text = db.execute("SELECT run_info_json FROM runs").fetchone()[0]
    stored = json.loads(text)
    assert list(stored) == keys and stored["trace"] is None and stored["source"] == "app.llm.LLM.generate"
    assert codec.dumps(RunInfo.from_json(stored).to_json()) == text
    with open_reader(path) as reader:
        info = reader.run_info()
    assert info == llm.run_info.replace(source="app.llm.LLM.generate", started_at=info.started_at)
    assert info.extra == {} and info.model_name and info.config["num_gpu_blocks"] == llm.config.num_gpu_blocks
    assert (info.executor, info.simulated) == (("sim", True) if kind == "sim" else (None, None))
