"""Regenerate docs/screenshot-scale.png: a replay of a production-scale recording.

    .venv/bin/batchscope run --executor sim --sim-model llama-3.1-8b --sim-device h100 \
        --trace ../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv --time-scale 0.1 \
        --max-num-seqs 256 --num-gpu-blocks 16384 --max-num-batched-tokens 8192 \
        --max-model-len 16384 --record /tmp/azure.sqlite
    QT_QPA_PLATFORM=offscreen .venv/bin/python docs/take_scale_screenshot.py /tmp/azure.sqlite --step 6000

Opens the recording in a replay window (1600x1000, or ``--size WxH``), shows ``--step``, selects
its oldest running request and saves the window (to ``--out``). The narrow-window screenshots of
docs/ui.md ("Reading it in a smaller window") come from the same script:

    ... docs/take_scale_screenshot.py /tmp/azure.sqlite --step 6000 --size 1024x700 --out docs/screenshot-1024.png
    ... docs/take_scale_screenshot.py LIVE_RUN_CUT_SHORT.sqlite --step 150 --size 1280x800 --out docs/screenshot-incomplete-1280.png

(the second on a recording of ``batchscope demo`` closed while requests were queued; its
background check is still running when the window is grabbed).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording")
    ap.add_argument("--step", type=int, default=6000)
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshot-scale.png"))
    ap.add_argument("--size", default="1600x1000", help="window size, WIDTHxHEIGHT pixels")
    a = ap.parse_args()
    from PySide6.QtWidgets import QApplication


    from recordings.file.open_reader import open_reader
    from ui import MainWindow

    app = QApplication.instance() or QApplication([])
    reader = open_reader(a.recording)
    win = MainWindow(reader, None, title="BatchScope — replay")
    win.resize(*(int(v) for v in a.size.split("x")))
    win.show()
    win.show_step(a.step)
    running = reader.state_at(a.step).queue_rows("running")
    if len(running):
        win.select_request(reader.state_at(a.step).request_ids[int(running[0])])
    for _ in range(3):
        app.processEvents()
        win.refresh(force=True)
    win.grab().save(a.out)
    win.close()                  # stops the background check (its child process)
    print(f"saved {a.out}")


if __name__ == "__main__":
    main()
