"""``batchscope bench --predict``: the simulated executor's prediction for the same requests, on the
measured peaks, printed and written next to the measurement; the simulation schedules the same steps."""
from __future__ import annotations

import json

from app.cli import main


def test_predict_runs_the_same_schedule_on_the_simulator_and_reports_its_time(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", "--small", "--device", "cpu", "--limit", "2", "--no-record", "--predict",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    p, f = res["prediction"], res["figures"]
    assert p["num_steps"] == f["num_steps"] and p["num_output_tokens"] == f["num_output_tokens"]
    assert p["duration_s"] > 0 and p["output_tokens_per_s"] == p["num_output_tokens"] / p["duration_s"]
    assert "predicted (sim)" in capsys.readouterr().out
