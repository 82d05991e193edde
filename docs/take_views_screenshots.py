"""Regenerate the block map and slot timeline screenshots of docs/ui.md ("Reading a big cache").

    python -m app.cli run --executor sim --sim-model llama-3.1-8b --sim-device h100 \\
        --trace ../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv --limit 2500 \\
        --time-scale 0.1 --max-num-seqs 256 --max-num-batched-tokens 8192 --record /tmp/conv26k.sqlite
    python -m app.cli run --executor sim --sim-model llama-3.1-8b --sim-device h100 \
        --trace ../shared/traces/mooncake-fast25/synthetic_trace.jsonl --limit 1200 \
        --time-scale 0.1 --max-num-seqs 256 --max-num-batched-tokens 8192 \
        --num-gpu-blocks 200000 --max-model-len 131072 --enable-prefix-caching --record /tmp/mc200k.sqlite
    python -m app.cli run --executor sim --sim-model llama-3.1-8b --sim-device h100 \
        --trace conversation_trace.jsonl --enable-prefix-caching --record /tmp/mcconv.sqlite
    # (conversation_trace.jsonl: kvcache-ai/Mooncake, FAST25-release/traces/, Apache-2.0; not in ../shared)
    QT_QPA_PLATFORM=offscreen python docs/take_views_screenshots.py /tmp/conv26k.sqlite --name 26k
    QT_QPA_PLATFORM=offscreen python docs/take_views_screenshots.py /tmp/mcconv.sqlite --name mcconv
    QT_QPA_PLATFORM=offscreen python docs/take_views_screenshots.py /tmp/mc200k.sqlite --name 200k

Opens the recording in a replay window (1600x1000), shows the step of highest KV usage (or
``--step``), selects the running request holding the most blocks and saves the block map in
both layouts and the slot timeline as ``docs/views-<name>-physical.png``, ``-request.png`` and
``-slots.png``.
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
    ap.add_argument("--name", required=True, help="file name part, e.g. 26k")
    ap.add_argument("--step", type=int, help="default: the step of highest KV usage")
    a = ap.parse_args()
    from PySide6.QtWidgets import QApplication

    from recordings.file.open_reader import open_reader
    from ui import MainWindow

    app = QApplication.instance() or QApplication([])
    reader = open_reader(a.recording)
    step = a.step
    if step is None:
        last = reader.latest_step()
        usage = [(s.kv_cache_usage, s.step) for s in reader.records(0, last + 1)]
        step = max(usage)[1]
    win = MainWindow(reader, None, title="BatchScope — replay")
    win.resize(1600, 1000)
    win.show()
    win.show_step(step)
    state = reader.state_at(step)
    running = state.queue_rows("running")
    if len(running):          # the biggest run: its white frame shows at a pixel a block
        biggest = running[int(state.columns["num_blocks"][running].argmax())]
        win.select_request(state.request_ids[int(biggest)])
    for layout in ("physical", "request"):
        win.block_map.set_layout(layout)
        for _ in range(3):
            app.processEvents()
            win.refresh(force=True)
        out = ROOT / "docs" / f"views-{a.name}-{layout}.png"
        win.block_map.grab().save(str(out))
        print(f"saved {out} (step {step}, {state.num_used_blocks:,}/{state.num_total_blocks:,} blocks)")
    out = ROOT / "docs" / f"views-{a.name}-slots.png"
    win.timeline.grab().save(str(out))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
