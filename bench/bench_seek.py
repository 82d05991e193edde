"""Cold seeks (``Reader.state_at(k)`` on a new reader, ``scale_rows.cold_seeks``) of one recording
by two code trees in the same run: a baseline checkout (``--base``, e.g. main's) and this one, each
in fresh processes taken in turns (base, this, base, this ...), with an empty heap and with
``--heap`` small objects held alive (a process like ``bench_scale.py`` or the window, where the
garbage collector's full passes cost tens of ms). Prints each run's lines and the ratios of the
medians (this / base). No assertion: the machine is shared, read the load it prints.

    python bench/bench_seek.py /tmp/s9/azure.sqlite --base /work/main
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(root: str, path: str, seeks: int, seed: int, heap: int) -> None:
    """Measure in this process with ``root``'s packages; print the run as one JSON line."""
    sys.path.insert(0, root)
    from scale_rows import cold_seeks, pct
    run = cold_seeks(path, seeks, seed=seed, heap_objects=heap)
    print("\n".join(run.lines()), file=sys.stderr)
    print(json.dumps({q: pct(getattr(run, f"{kind}_ms"), p) for kind in ("wall", "cpu")
                      for q, p in ((f"{kind}_p50", 50), (f"{kind}_p90", 90), (f"{kind}_max", 100))}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a recording (schema >= 2)")
    ap.add_argument("--base", help="the baseline checkout's root (e.g. /work/main)")
    ap.add_argument("--seeks", type=int, default=50, help="random steps per run")
    ap.add_argument("--heap", type=int, default=2_000_000, help="objects held alive in the heap runs")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each tree and heap, in turns")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs=2, metavar=("ROOT", "HEAP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], args.path, args.seeks, args.seed, int(args.child[1]))
    if not args.base:
        ap.error("--base is required")
    trees = {"base": str(Path(args.base).resolve()), "this": str(HERE.parent)}
    results: dict[tuple[str, int], list[dict]] = {}
    for r in range(args.rounds):
        for heap in (0, args.heap):
            for name, root in trees.items():
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, str(HERE / "bench_seek.py"), args.path, "--seeks",
                                      str(args.seeks), "--seed", str(args.seed + r), "--child", root, str(heap)],
                                     capture_output=True, text=True, check=True)
                print(f"[{name} {root}, heap {heap:,}, load {load:.2f}]\n{out.stderr.rstrip()}", flush=True)
                results.setdefault((name, heap), []).append(json.loads(out.stdout))
    print("\nmedian over rounds, ms (this / base):")
    for heap in (0, args.heap):
        base, this = (results[(n, heap)] for n in ("base", "this"))
        cells = []
        for key in base[0]:
            b = sorted(x[key] for x in base)[len(base) // 2]
            t = sorted(x[key] for x in this)[len(this) // 2]
            cells.append(f"{key} {b:.1f} -> {t:.1f} ({t / b:.2f}x)")
        print(f"  heap {heap:,}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
