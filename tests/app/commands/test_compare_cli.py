"""``batchscope compare`` as a user runs it (in-process): running configs, comparing recordings,
the HTML report, and the errors."""
from __future__ import annotations

import base64
import re
import shutil

import pytest

from app.cli import main
from app.presets import PRESETS
from recordings.compare.comparison import compare_recordings
from recordings.file.open_reader import open_reader
from recordings.workloads.workload import DEMO_TRACE

SIM = ("--trace", str(DEMO_TRACE), "--limit", "24", "--time-scale", "0.05", "--max-num-seqs", "4",
       "--num-gpu-blocks", "120", "--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100")


@pytest.fixture(scope="module")
def sim_pair(tmp_path_factory):
    """static and fcfs recordings of one simulated workload, made by ``compare`` itself."""
    out = tmp_path_factory.mktemp("sim") / "out"
    assert main(["compare", *SIM, "--policies", "static,fcfs", "--out", str(out), "--no-window"]) == 0
    return out


def test_compare_runs_each_policy_and_prints_the_ratios(sim_pair, capsys):
    paths = sorted(sim_pair.glob("*.sqlite"))
    assert [p.name for p in paths] == ["1-static.sqlite", "2-fcfs.sqlite"]
    assert [open_reader(p).run_info().config["policy"] for p in paths] == ["static", "fcfs"]
    assert "requests" in (sim_pair / "1-static.txt").read_text()       # each run's own summary
    assert main(["compare", *map(str, paths), "--no-window", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"output tokens/s\s+[\d,.]+\s+[\d,.]+\s+\([\d.]+x\)", out)
    assert "TTFT p99 (s)" in out and "slot occupancy %" in out and "Jain's index" in out
    assert "per request, B = 2-fcfs vs A = 1-static" in out


def test_a_preset_sizes_every_run_and_a_given_flag_wins(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", "--preset", "sim", "--trace", str(DEMO_TRACE), "--limit", "12",
                 "--max-num-seqs", "8", "--policies", "static,fcfs", "--out", str(out), "--no-window"]) == 0
    infos = [open_reader(p).run_info() for p in sorted(out.glob("*.sqlite"))]
    sim = PRESETS["sim"].values
    assert [i.config["policy"] for i in infos] == ["static", "fcfs"]
    for info in infos:
        c = info.config
        assert c["max_num_seqs"] == 8                                   # given on the command line
        assert (c["max_model_len"], c["max_num_batched_tokens"]) == (sim["max_model_len"],
                                                                    sim["max_num_batched_tokens"])
        assert info.executor == "sim" and info.trace["num_rows"] == 12
    assert "Jain's index" in capsys.readouterr().out


def test_configs_override_knobs_per_run(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", *SIM, "--configs", "policy=fcfs;policy=fcfs,max_num_seqs=2,enable_prefix_caching=1",
                 "--out", str(out), "--no-window"]) == 0
    cfgs = [open_reader(p).run_info().config for p in sorted(out.glob("*.sqlite"))]
    assert [(c["max_num_seqs"], c["enable_prefix_caching"]) for c in cfgs] == [(4, False), (2, True)]
    assert "policy=fcfs,max_num_seqs=2,enable_prefix_caching=1" in capsys.readouterr().out


def test_report_is_self_contained_and_escapes_recorded_strings(sim_pair, tmp_path, capsys):
    a = tmp_path / "<b>static.sqlite"            # a name from the user's disk goes into the page
    shutil.copy(sim_pair / "1-static.sqlite", a)
    report = tmp_path / "ab.html"
    assert main(["compare", str(a), str(sim_pair / "2-fcfs.sqlite"), "--no-window", "--report", str(report)]) == 0
    page = report.read_text()
    assert "&lt;b&gt;static" in page and "<b>static" not in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3 and all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "Jain" in page and "Most slowed down" in page
    assert not re.search(r'(src|href)="(?!data:)', page)          # nothing fetched from elsewhere


def test_recordings_of_different_workloads_are_refused(sim_pair, tmp_path, capsys):
    other = tmp_path / "other"
    args = [a if a != "24" else "20" for a in SIM]            # --limit 20: another workload
    assert main(["compare", *args, "--policies", "fcfs,static", "--out", str(other), "--no-window"]) == 0
    capsys.readouterr()
    assert main(["compare", str(sim_pair / "1-static.sqlite"), str(other / "1-fcfs.sqlite"), "--no-window"]) == 1
    err = capsys.readouterr().err
    assert "not runs of one workload: 24 vs 20 requests" in err and "same trace" in err


@pytest.mark.parametrize("argv, message", [
    (("--configs", "policy=static;batch=3"), "unknown knob 'batch'"),
    (("--configs", "policy=static"), "two or more configs, got 1"),
    (("--policies", "static,lifo"), "policy=lifo: choose from"),
    (("--configs", "policy=fcfs;max_num_seqs=many"), "max_num_seqs=many: not a valid int"),
    (("--configs", "policy=fcfs;enable_prefix_caching=maybe"), "a switch takes 1/0"),
    (("--policies", "fcfs,static", "--configs", "policy=fcfs;policy=static"), "not both"),
    (("a.sqlite",), "two or more recordings, got 1"),
    (("a.sqlite", "b.sqlite", "--policies", "fcfs,static"), "not both"),
    (("--policies", "fcfs,static", "--configs", "x"), "not both"),
])
def test_usage_errors_exit_2_before_running_anything(argv, message, tmp_path, capsys):
    assert main(["compare", *argv, "--out", str(tmp_path / "o"), "--no-window"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_missing_trace_stops_before_any_run(tmp_path, capsys):
    assert main(["compare", "--trace", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o"), "--no-window"]) == 1
    assert "trace file not found" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_compare_on_the_cpu_model_opens_the_window(tiny_model, tmp_path, capsys, monkeypatch):
    """The CPU model (a tiny random Llama), virtual clock; the window opens on both runs."""
    from PySide6.QtWidgets import QApplication

    shown = {}

    def fake_exec(app):
        from ui.compare.window import CompareWindow
        w = next(w for w in app.topLevelWidgets() if isinstance(w, CompareWindow) and w.isVisible())
        shown["panes"] = [p.source.run_info().config["policy"] for p in w.panes]
        shown["steps"] = [p.latest for p in w.panes]
        w.close()
        return 0

    monkeypatch.setattr(QApplication, "exec", fake_exec)
    out = tmp_path / "out"
    assert main(["compare", "--model", str(tiny_model), "--limit", "10", "--clock", "virtual",
                 "--max-prompt-tokens", "32", "--max-output-tokens", "8", "--num-gpu-blocks", "40",
                 "--max-num-seqs", "4", "--policies", "static,fcfs", "--out", str(out)]) == 0
    assert shown["panes"] == ["static", "fcfs"] and min(shown["steps"]) > 0
    assert "TPOT p50 (steps)" in capsys.readouterr().out


def test_rejections_are_counted_and_explained_per_run(tmp_path, capsys):
    """Runs that reject requests (prompt + max_tokens over max_model_len) say so in the table,
    with each run's reasons grouped as `run` prints them, in the output and the report."""
    out, report = tmp_path / "out", tmp_path / "r.html"
    assert main(["compare", *SIM, "--configs", "policy=fcfs,max_model_len=512;policy=fcfs,max_model_len=1024",
                 "--out", str(out), "--no-window", "--top", "0", "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    counts = []
    for path in sorted(out.glob("*.sqlite")):
        with open_reader(path) as r:
            counts.append(r.execute("SELECT count(*) FROM requests WHERE status = 'FINISHED_ERROR'")[0][0])
    assert counts[0] > counts[1] > 0                               # a shorter max_model_len rejects more
    assert re.search(rf"rejected / failed\s+{counts[0]} of 24\s+{counts[1]} of 24", printed)
    for limit, n in zip((512, 1024), counts):
        assert re.search(rf"max_model_len={limit}: {n} of 24 requests failed or were rejected at admission:\n"
                         rf"  {n} x prompt \([\d–]+\) \+ max_tokens \([\d–]+\) = [\d–]+ tokens exceeds "
                         rf"max_model_len {limit}  \[r", printed)
    html = report.read_text()
    assert f"{counts[0]} of 24 requests failed" in html and "exceeds max_model_len 1024" in html


def test_runs_that_reject_the_same_requests_share_one_report(sim_pair, capsys):
    paths = sorted(sim_pair.glob("*.sqlite"))
    assert main(["compare", *map(str, paths), "--no-window", "--top", "0"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"rejected / failed\s+(\d+) of 24\s+(\d+) of 24", out)
    assert m and m[1] == m[2] != "0"                        # 120 blocks: the longest never fit
    assert out.count("requests failed or were rejected at admission") == 1
    assert f"1-static, 2-fcfs: {m[1]} of 24 requests failed" in out


def test_runs_without_rejections_print_no_rejection_report(tmp_path, capsys):
    args = [a if a != "120" else "600" for a in SIM]      # a cache and a length every request fits
    assert main(["compare", *args, "--max-model-len", "8192", "--policies", "static,fcfs",
                 "--out", str(tmp_path / "o"), "--no-window", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"rejected / failed\s+0 of 24\s+0 of 24", out) and "rejected at admission" not in out


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"QT_QPA_PLATFORM": "offscreen"}, {"QT_QPA_PLATFORM": ""}])
def test_report_without_a_display_never_waits_on_a_window(sim_pair, tmp_path, env):
    """A headless `compare --report` writes the report and returns (a subprocess with a timeout:
    one that waited on an invisible window would hang)."""
    import os
    import subprocess
    import sys

    paths = [str(p) for p in sorted(sim_pair.glob("*.sqlite"))]
    report = tmp_path / "r.html"
    clean = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    clean.update({k: v for k, v in env.items() if v})
    done = subprocess.run([sys.executable, "-m", "app.cli", "compare", *paths, "--report", str(report)],
                          capture_output=True, text=True, timeout=300, env=clean)
    assert done.returncode == 0, done.stderr
    assert report.is_file() and "the compare window is not opened" in done.stderr


def test_report_plots_are_light_with_a_legend_and_clear_axes(sim_pair, tmp_path):
    from PySide6.QtGui import QImage

    from app.commands.compare import report_html

    paths = sorted(sim_pair.glob("*.sqlite"))
    report_html._app()
    w = report_html.metrics_plots(paths, ["static", "fcfs"])
    legend = w.plots["throughput"].legend                      # "Over the run": which colour is which
    assert legend is not None and [label.text for _, label in legend.items] == ["static", "fcfs"]
    for p in w.plots.values():
        assert p.getAxis("bottom").height() >= report_html.BOTTOM_AXIS_HEIGHT
        assert p.getAxis("left").width() >= report_html.LEFT_AXIS_WIDTH
        assert p.getAxis("bottom").textPen().color().name() == report_html.PAGE_FG
    c = compare_recordings(paths, ["static", "fcfs"])
    for png in (report_html.metrics_png(paths, ["static", "fcfs"]), report_html.cdf_png(c),
                report_html.scatter_png(c, 1)):
        img = QImage.fromData(base64.b64decode(png), "PNG")
        corners = {img.pixelColor(x, y).name() for x, y in ((1, 1), (img.width() - 2, 1))}
        assert corners == {"#ffffff"}                           # the page's white, not the window's dark
    _, p = report_html._plot("x title", "y title")
    bottom = p.getAxis("bottom")
    # the axis title sits below the tick labels: the label's top is past the tick text's height
    assert bottom.label.pos().y() >= bottom.style["tickTextOffset"][1] + 9
