"""``batchscope run`` without ``--num-gpu-blocks`` sizes the KV cache for the workload (not a pool
of thousands of blocks used at 2%), on the simulated executor (no model load)."""
from __future__ import annotations

from app.cli import main
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader
from recordings.check.invariants import check_recording
from recordings.workloads.workload import DEMO_TRACE

SIM = ("run", "--trace", str(DEMO_TRACE), "--limit", "30", "--time-scale", "0.05", "--max-num-seqs", "8",
       "--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100")


def workload_blocks(reader: Reader) -> int:
    cfg = reader.run_info().config
    bs = cfg["block_size"]
    sizes = sorted((-(-(p + m) // bs) for p, m in reader.execute(
        "SELECT num_prompt_tokens, max_tokens FROM requests") if p + m <= cfg["max_model_len"]),
        reverse=True)
    return sum(sizes[:cfg["max_num_seqs"]])


def test_the_default_pool_fits_the_workload(tmp_path, capsys):
    out = tmp_path / "sized.sqlite"
    assert main([*SIM, "--record", str(out)]) == 0
    err = capsys.readouterr().err
    assert "KV cache sized for the workload" in err
    assert "max_num_seqs x max_model_len would give" in err          # an A100 holds more: the cap binds
    with open_reader(out) as reader:
        cfg = reader.run_info().config
        assert cfg["num_gpu_blocks"] == workload_blocks(reader)
        peak = reader.execute("SELECT max(kv_cache_usage) FROM steps")[0][0]
        assert peak > 0.2                                  # not a few cells lit in a huge map
        # served as with the memory-sized pool: only requests over max_model_len are refused
        errors = [e for (e,) in reader.execute("SELECT error FROM requests WHERE error IS NOT NULL")]
        assert all("exceeds max_model_len" in e for e in errors)
        assert reader.execute("SELECT count(*) FROM requests WHERE status = 'FINISHED_LENGTH'")[0][0] >= 20
        assert check_recording(reader) == []


def test_a_chosen_pool_or_prefix_caching_keeps_its_size(tmp_path, capsys):
    chosen = tmp_path / "chosen.sqlite"
    assert main([*SIM, "--num-gpu-blocks", "200", "--record", str(chosen)]) == 0
    cached = tmp_path / "cached.sqlite"
    assert main([*SIM, "--enable-prefix-caching", "--record", str(cached)]) == 0
    assert "sized for the workload" not in capsys.readouterr().err
    assert open_reader(chosen).run_info().config["num_gpu_blocks"] == 200
    with open_reader(cached) as reader:
        assert reader.run_info().config["num_gpu_blocks"] > workload_blocks(reader)
