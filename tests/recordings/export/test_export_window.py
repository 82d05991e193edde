"""The window and the Perfetto export agree on every slice: the runs of one request in one slot
that the window's slot timeline draws (``ui.views.slot_timeline.SlotTimeline`` fed by the same step
summaries the window reads from a recording) are exactly the export's slot slices."""
from __future__ import annotations

import json

import numpy as np

from tests.support.export_runs import sim_demo
from recordings.file.open_reader import open_reader
from recordings.export.perfetto import SLOTS_PID, export_perfetto



def window_runs(path, qtbot) -> set[tuple[int, str, int, int]]:
    """(slot, request id, first step, last step) of every run of cells of one request in the
    slot timeline the window draws for the whole recording at ``path``."""
    from ui.views.slot_timeline import SlotTimeline
    from ui.step_summary import fetch_summaries

    with open_reader(path) as reader:
        latest = reader.latest_step()
        max_num_seqs = reader.run_info().config["max_num_seqs"]
        steps = fetch_summaries(reader, 0, latest + 1)      # the window's RecordCache reads these
    view = SlotTimeline(max_num_seqs, window=4 * (latest + 1) + 128)   # one span: the whole run
    qtbot.addWidget(view)
    view.set_records(steps, latest, max_num_seqs, latest)
    assert view.first_step == 0 and view.span > latest
    key = view._grid[2]                                     # (slot, step) -> request key, -1 idle
    runs = set()
    for slot, row in enumerate(key):
        edges = np.flatnonzero(np.diff(np.r_[-2, row, -2])) # where the drawn request changes
        for a, b in zip(edges[:-1], edges[1:]):
            if row[a] >= 0:
                runs.add((slot, view._ids[row[a]], int(a), int(b - 1)))
    return runs


def export_runs(path, out) -> set[tuple[int, str, int, int]]:
    with open_reader(path) as reader:
        export_perfetto(reader, out)
    with open(out, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    slices = [e for e in events if e["ph"] == "X" and e["pid"] == SLOTS_PID]
    runs = {(e["tid"], e["name"], e["args"]["first_step"], e["args"]["last_step"]) for e in slices}
    assert len(runs) == len(slices)
    return runs


def test_fake_runner_recording(recorded, tmp_path, qtbot):
    drawn = window_runs(recorded.path, qtbot)
    assert len(drawn) > len(recorded.prompts) // 2
    assert export_runs(recorded.path, tmp_path / "t.json") == drawn


def test_simulated_demo_recording(tmp_path, qtbot):
    rec = sim_demo(tmp_path / "sim.sqlite", limit=60)
    drawn = window_runs(rec, qtbot)
    assert len(drawn) >= 60
    assert export_runs(rec, tmp_path / "t.json") == drawn
