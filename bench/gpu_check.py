"""GPU check, one command on the GPU image as it is (Python 3.12, torch, triton, transformers; no
network): run through the device tool from the repository root with ``.whl`` carried

    python bench/gpu_check.py --out "$OUT"        # at most 8 minutes (--budget-s) on an H100/H200
    python bench/gpu_check.py --cpu-smoke --out /tmp/gc   # every stage once, tiny shapes, on a CPU

What the image lacks (the recorder's sqlite-utils and what it imports, tabulate) is installed first
from the wheels in ``.whl/`` (``bench/carried_wheels.py``; nothing else of the project is needed:
the bench path imports no Qt and no SQLite layer unless recording). Then, each stage a child
process whose timeout comes from the budget left (a hung stage costs its share, not the run):

1. ``kernels``: the Triton paged-attention kernels vs the torch reference (``bench/triton_check.py``).
2. ``equality``: fp32 greedy outputs of 16 mixed-length requests through the engine together
   (chunked prefill, recompute preemption) vs transformers ``generate()`` on each alone: eager with
   the Triton attention (the CUDA default), eager with the torch reference, and with CUDA graphs
   for the decode-only steps (Triton decode kernel), each with the engine's own fused forward (the
   default, ``--model-impl auto``) and eager and graphs with transformers' forward too. On a CPU:
   the reference, eager and padded, both forwards.
3. ``bench off`` / ``bench on``: ``batchscope bench`` on the anchor workload (random-weight
   Llama-3.2-1B shape, bf16, 512 requests at t=0, EOS off) with the defaults (on CUDA: Triton
   attention, CUDA graphs, our fused forward), recording off, then on.
4. ``peer``: ``bench/hf_peer.py``: HF transformers continuous batching at its best setting (CUDA
   graphs on) on the same model and requests, in the same call.
5. ``bench transformers``: the bench (recording off) with transformers' forward
   (``--model-impl transformers``), for the fused forward's speed-up in the same call.
6. ``bench old``: the bench with the previous defaults (torch reference attention, no graphs,
   transformers' forward), only when the budget still has room.
Writes ``gpu_check.json`` (every stage's result) and ``gpu_check.txt`` (one table) into ``--out``
and prints the table. Exit 0 when the kernels pass, every equality holds and both bench runs ran.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BUDGET_S = 8 * 60               # the whole check, as lent
CPU_BUDGET_S = 30 * 60          # --cpu-smoke on a busy 2-core machine
# stage -> (most seconds it may take, seconds kept for it while earlier stages run), on a GPU
STAGES = {"kernels": (120, 30), "equality": (120, 30), "bench off": (150, 60), "bench on": (150, 60),
          "peer": (200, 60), "bench transformers": (150, 60), "bench old": (150, 0)}
OLD_DEFAULTS_MIN_S = 100        # run the previous defaults only with this much left


class Budget:
    """Seconds left of the check's budget, and each stage's share of it: at most its cap, leaving
    every later stage its reserve (:data:`STAGES`, both scaled by ``total_s / BUDGET_S``: a CPU
    smoke run's longer budget gives every stage proportionally more)."""

    def __init__(self, total_s: float) -> None:
        self.total_s, self.started = total_s, time.perf_counter()
        self.scale = max(1.0, total_s / BUDGET_S)

    def left(self) -> float:
        return self.total_s - (time.perf_counter() - self.started)

    def timeout(self, stage: str) -> float:
        names = list(STAGES)
        later = self.scale * sum(STAGES[s][1] for s in names[names.index(stage) + 1:])
        return max(10.0, min(self.scale * STAGES[stage][0], self.left() - later))


def check_equality(device: str, small: bool, num_requests: int = 16) -> dict:
    """Greedy engine outputs == per-request ``generate()``, fp32, for ``num_requests`` mixed-length
    requests sharing the engine (chunked prefill, preemption), in each attention mode of the
    device (see the module docstring). Returns per mode the number of identical requests, and
    ``skipped`` modes with the reason."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.request import SamplingParams
    from engine.runner.attention.triton_attention import triton_available
    from engine.runner.cuda_graphs import enable_cuda_graphs
    from engine.runner.model_runner import ModelRunner

    cfg = LlamaConfig(hidden_size=128 if small else 512, intermediate_size=256 if small else 1536,
                      num_hidden_layers=2 if small else 6, num_attention_heads=4 if small else 8,
                      num_key_value_heads=2, vocab_size=1000 if small else 32000, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.float32).eval()
    rng = random.Random(1)
    reqs = [([rng.randint(3, cfg.vocab_size - 1) for _ in range(rng.randint(5, 120))], rng.randint(4, 24))
            for _ in range(num_requests)]
    cuda = device.startswith("cuda")
    # mode -> (BATCHSCOPE_ATTENTION, CUDA graphs, model_impl); the default attention is Triton on
    # CUDA, the default forward our own (auto)
    modes = {"eager": ("", False, "auto"), "graphs": ("", True, "auto"),
             "eager transformers-fwd": ("", False, "transformers"), "graphs transformers-fwd": ("", True, "transformers")}
    skipped = {}
    if cuda and triton_available():
        modes["eager reference"] = ("reference", False, "auto")
    else:
        skipped["Triton"] = "no CUDA" if not cuda else "triton not installed"
    runs = {}
    for mode, (attention, graphs, impl) in modes.items():
        os.environ["BATCHSCOPE_ATTENTION"] = attention
        ecfg = EngineConfig(num_gpu_blocks=20, block_size=8, max_num_batched_tokens=64, max_num_seqs=16,
                            clock="virtual", cuda_graphs=graphs, model_impl=impl)
        runner = ModelRunner.from_config(model, ecfg)
        enable_cuda_graphs(runner, ecfg, progress=False)
        eng = LLMEngine(ecfg, runner, ecfg.num_gpu_blocks)
        done = eng.collect_finished()
        for i, (p, o) in enumerate(reqs):
            eng.add_request(p, SamplingParams(max_tokens=o, ignore_eos=True), request_id=f"r{i}")
        runs[mode] = (done, eng.run_until_done())
    os.environ.pop("BATCHSCOPE_ATTENTION", None)
    equal = dict.fromkeys(runs, 0)
    model.set_attn_implementation("sdpa")      # the reference runs transformers' own attention
    with torch.inference_mode():
        for i, (p, o) in enumerate(reqs):
            ref = model.generate(torch.tensor([p], device=device), max_new_tokens=o, do_sample=False,
                                 eos_token_id=-1, pad_token_id=0)[0, len(p):].tolist()
            for mode, (d, _) in runs.items():
                equal[mode] += ref == d[f"r{i}"].output_token_ids
    done, recs = runs["eager"]
    rejected = sum(d[f"r{i}"].status.value == "FINISHED_ERROR" for d, _ in runs.values() for i in range(len(reqs)))
    return {"requests": len(reqs), "equal": equal, "skipped": skipped,
            "preemptions": sum(r.num_preemptions for r in recs), "steps": len(recs), "rejected": rejected}


def run_tool(argv: list[str], timeout_s: float, env: dict | None = None) -> tuple[int | None, float, str]:
    """Run ``argv`` (a Python script or module of this repository) in a child process from the
    repository root; returns (exit code or None on timeout, seconds, its output's last 3,000
    characters)."""
    t = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-3000:]
        return None, time.perf_counter() - t, out.decode(errors="replace") if isinstance(out, bytes) else out
    return done.returncode, time.perf_counter() - t, (done.stdout + done.stderr)[-3000:]


def _child_json(argv: list[str], out: Path, timeout_s: float, env: dict | None = None) -> dict:
    """A stage run as a child that writes JSON to ``out``: that JSON plus ``seconds``, or ``error``."""
    rc, secs, tail = run_tool(argv, timeout_s, env)
    if rc != 0 or not out.is_file():
        what = f"timed out after {secs:.0f} s" if rc is None else f"exit {rc} after {secs:.0f} s"
        return {"error": f"{what}: {tail[-800:]}", "seconds": secs}
    return {**json.loads(out.read_text()), "seconds": secs}


def bench(small: bool, limit: int, device: str, record: Path | None, json_out: Path, timeout_s: float,
          old_defaults: bool = False, predict: bool = False, model_impl: str | None = None) -> dict:
    """``batchscope bench`` on the anchor workload (the tiny shape and the first ``limit`` requests
    when ``small``), recording to ``record`` or off; ``old_defaults``: the torch reference
    attention, no CUDA graphs and transformers' forward; ``model_impl``: ``--model-impl``.
    Returns its --json figures, or ``error``."""
    argv = ["-m", "app.cli", "bench", "--device", device, "--json", str(json_out)]
    argv += ["--small", "--limit", str(limit)] if small else []
    argv += ["--record", str(record)] if record else ["--no-record"]
    argv += ["--cuda-graphs", "off", "--model-impl", "transformers"] if old_defaults else []
    argv += ["--model-impl", model_impl] if model_impl else []
    argv += ["--predict"] if predict else []
    return _child_json(argv, json_out, timeout_s, {"BATCHSCOPE_ATTENTION": "reference"} if old_defaults else None)


def peer(small: bool, limit: int, variants: str, json_out: Path, timeout_s: float) -> dict:
    """``bench/hf_peer.py`` (HF continuous batching at ``variants``, no static batching) on the same
    model and requests as :func:`bench`; its JSON or ``error``."""
    argv = ["bench/hf_peer.py", "--cb-variants", variants, "--static-batch", "0", "--json", str(json_out),
            "--timeout", str(max(10, int(timeout_s)))]
    argv += ["--small", "--limit", str(limit)] if small else []
    return _child_json(argv, json_out, timeout_s)


def kernels(small: bool, device: str, timeout_s: float) -> dict:
    """``bench/triton_check.py`` (kernels vs the torch reference; on a CPU the interpreter, tiny
    shapes, correctness only): ok, rc, seconds, its last lines."""
    argv = ["bench/triton_check.py", "--device", device] + (["--small", "--iters", "0"] if small else [])
    rc, secs, tail = run_tool(argv, timeout_s)
    return {"ok": rc == 0, "rc": rc, "seconds": secs, "tail": tail, "device": device}


def equality(small: bool, device: str, num_requests: int, json_out: Path, timeout_s: float) -> dict:
    """:func:`check_equality` in a child process (``--stage equality``)."""
    argv = ["bench/gpu_check.py", "--stage", "equality", "--device", device, "--requests", str(num_requests),
            "--out", str(json_out.parent)] + (["--small"] if small else [])
    return _child_json(argv, json_out, timeout_s)


def bench_cells(res: dict) -> list:
    """A table row's figures of one ``batchscope bench`` result."""
    if "error" in res:
        return [res["error"].splitlines()[0][:70]] + [""] * 6
    f = res["figures"]
    ms = lambda v: "n/a" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    return [f"{f['output_tokens_per_s']:,.0f}", f"{ms(f['ttft_p50_s'])} / {ms(f['ttft_p99_s'])}",
            f"{ms(f['tpot_p50_s'])} / {ms(f['tpot_p99_s'])}", f"{f['steps_per_s']:,.1f}",
            f"{f['roofline_efficiency']:.1%}", f"{f['duration_s']:.1f}", f"{f['num_output_tokens']:,}"]


def equality_line(eq: dict) -> str:
    """``equality fp32: eager 16/16, graphs 16/16, ... token-identical to generate()`` (or the error)."""
    if "error" in eq:
        return f"equality fp32: FAILED ({eq['error'].splitlines()[0][:120]})"
    n = eq["requests"]
    parts = [f"{mode} {k}/{n}" for mode, k in eq["equal"].items()]
    parts += [f"{what}: skipped: {why}" for what, why in eq.get("skipped", {}).items()]
    return (f"equality fp32: {', '.join(parts)} token-identical to generate() "
            f"({eq['preemptions']} preemptions, {eq['steps']} steps)")


def summary_table(eq: dict, tri: dict, off: dict, on: dict, hf: dict, same_workload: bool = True,
                  old: dict | None = None, hf_fwd: dict | None = None) -> str:
    """The final table: one row per system, then the ratios and the checks. ``same_workload``
    False leaves out the engine / HF ratio; ``old``: the bench with the previous defaults, when it
    ran; ``hf_fwd``: the bench with transformers' forward, when it ran."""
    from tabulate import tabulate

    rows = [["BatchScope bench, recording off", *bench_cells(off)],
            ["BatchScope bench, recording on", *bench_cells(on)]]
    if hf_fwd is not None:
        rows.append(["BatchScope bench, transformers fwd", *bench_cells(hf_fwd)])
    if old is not None:
        rows.append(["BatchScope bench, old defaults", *bench_cells(old)])
    best = None
    for key, value in hf.items():
        if key.startswith("hf_cb") and isinstance(value, dict):
            if "error" in value:
                rows.append([key, value["error"][:70]] + [""] * 6)
                continue
            rows.append([key, f"{value['out_tok_per_s']:,.0f}", "", "", "", "", f"{value['run_s']:.1f}",
                         f"{value['out_tokens']:,}"])
            best = max(best or 0.0, value["out_tok_per_s"])
    if "error" in hf:
        rows.append(["HF peer", hf["error"].splitlines()[0][:70]] + [""] * 6)
    table = tabulate(rows, headers=["system", "out tok/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "steps/s",
                                    "roofline eff.", "run s", "out tokens"], disable_numparse=True)
    lines = [table, ""]
    fig_off, fig_on = off.get("figures"), on.get("figures")
    if fig_off and best and same_workload:
        lines.append(f"engine / HF best: {fig_off['output_tokens_per_s'] / best:.1f}x (target >= 10x)")
    if fig_off and fig_on:
        lines.append(f"recording cost: {1 - fig_on['output_tokens_per_s'] / fig_off['output_tokens_per_s']:.1%} "
                     "of throughput (target < 5%)")
    fig_fwd = (hf_fwd or {}).get("figures")
    if fig_off and fig_fwd:
        lines.append(f"fused / transformers forward: {fig_off['output_tokens_per_s'] / fig_fwd['output_tokens_per_s']:.2f}x "
                     "output tokens/s (recording off, same call)")
    fig_old = (old or {}).get("figures")
    if fig_off and fig_old:
        lines.append(f"new / old defaults: {fig_off['output_tokens_per_s'] / fig_old['output_tokens_per_s']:.2f}x "
                     "output tokens/s (recording off)")
    compiles = [f"{name} {res['kernel_compiles_during_run']}" for name, res in (("off", off), ("on", on))
                if res.get("kernel_compiles_during_run") is not None]
    if compiles:
        lines.append(f"Triton compiles during the timed runs (0 expected after warm-up): {', '.join(compiles)}")
    pred = off.get("prediction")
    if fig_off and pred and pred.get("output_tokens_per_s"):
        lines.append(f"simulator's prediction (default calibration, measured peaks): {pred['output_tokens_per_s']:,.0f} "
                     f"out tok/s; measured / predicted time {fig_off['duration_s'] / pred['duration_s']:.2f}")
    peaks = off.get("peaks") or on.get("peaks")
    if peaks:
        lines.append(f"peaks measured by bench: {peaks['peak_flops'] / 1e12:.4g} TFLOP/s, "
                     f"{peaks['mem_bandwidth'] / 1e12:.3g} TB/s copy")
    lines.append(equality_line(eq))
    lines.append(f"triton kernels: {'ok' if tri['ok'] else 'FAILED (exit ' + str(tri['rc']) + ')'} "
                 f"({tri['seconds']:.0f} s" + ("" if tri.get("device", "cuda") == "cuda" else
                                                "; Triton interpreter, compiled kernels: skipped: no CUDA") + ")")
    return "\n".join(lines)


def passed(eq: dict, tri: dict, off: dict, on: dict) -> bool:
    """The check's verdict: kernels ok, every equality mode identical on every request, both bench runs ran."""
    return (tri["ok"] and "error" not in eq and all(k == eq["requests"] for k in eq["equal"].values())
            and "error" not in off and "error" not in on)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu_check_out"),
                    help="folder for gpu_check.json, gpu_check.txt and the stages' files (default: $OUT, else "
                         "./gpu_check_out)")
    ap.add_argument("--device", help="default: cuda when available, else cpu")
    ap.add_argument("--small", action="store_true", help="tiny model, a few anchor requests (CPU)")
    ap.add_argument("--cpu-smoke", action="store_true", help="= --device cpu --small, the fewest requests: every "
                                                             "stage once; the stages that need CUDA say skipped")
    ap.add_argument("--budget-s", type=float, help=f"seconds for the whole check (default: {BUDGET_S} on a GPU, "
                                                   f"{CPU_BUDGET_S} with --cpu-smoke)")
    ap.add_argument("--peer-variants", default="graphs", help="hf_peer.py --cb-variants (default: %(default)s)")
    ap.add_argument("--requests", type=int, default=16, help=argparse.SUPPRESS)
    ap.add_argument("--stage", choices=["equality"], help=argparse.SUPPRESS)    # a child's one stage
    args = ap.parse_args(argv)
    from carried_wheels import ensure
    installed = ensure()                # before anything imports tabulate or sqlite_utils
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.cpu_smoke:
        args.device, args.small, args.requests = "cpu", True, 4
    args.budget_s = args.budget_s or (CPU_BUDGET_S if args.cpu_smoke else BUDGET_S)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "equality":
        (args.out / "equality.json").write_text(json.dumps(check_equality(args.device, args.small, args.requests)))
        return 0
    budget = Budget(args.budget_s)
    gpu = args.device.startswith("cuda")
    limit = 2 if args.cpu_smoke else 16          # anchor requests of a small run
    head = (f"torch {torch.__version__}, device {args.device}" + (f" ({torch.cuda.get_device_name()})" if gpu else "")
            + f"; carried wheels installed: {', '.join(installed) or 'none needed'}")
    print(head, flush=True)
    res = {"device": args.device, "gpu": torch.cuda.get_device_name() if gpu else None, "torch": torch.__version__,
           "installed_wheels": installed, "budget_s": args.budget_s}
    tri = res["kernels"] = kernels(args.small, "cuda" if gpu else "cpu", budget.timeout("kernels"))
    print(f"kernels: {'ok' if tri['ok'] else 'FAILED'} ({tri['seconds']:.0f} s)\n{tri['tail'][-1500:]}", flush=True)
    eq = res["equality"] = equality(args.small, args.device, args.requests, args.out / "equality.json",
                                    budget.timeout("equality"))
    print(equality_line(eq), flush=True)
    off = res["bench_off"] = bench(args.small, limit, args.device, None, args.out / "bench_off.json",
                                   budget.timeout("bench off"), predict=True)
    print("bench, recording off:", off.get("figures") or off, flush=True)
    with tempfile.TemporaryDirectory() as tmp:       # the recording stays here: only figures come back
        on = res["bench_on"] = bench(args.small, limit, args.device, Path(tmp) / "bench_on.sqlite",
                                     args.out / "bench_on.json", budget.timeout("bench on"))
    print("bench, recording on :", on.get("figures") or on, flush=True)
    hf = res["peer"] = peer(args.small, limit, args.peer_variants if gpu else "default", args.out / "peer.json",
                            budget.timeout("peer"))
    print("peer:", hf, flush=True)
    hf_fwd = res["bench_transformers"] = bench(args.small, limit, args.device, None,
                                               args.out / "bench_transformers.json",
                                               budget.timeout("bench transformers"), model_impl="transformers")
    print("bench, transformers forward:", hf_fwd.get("figures") or hf_fwd, flush=True)
    old = None
    if budget.left() >= OLD_DEFAULTS_MIN_S * budget.scale:
        old = res["bench_old"] = bench(args.small, limit, args.device, None, args.out / "bench_old.json",
                                       budget.timeout("bench old"), old_defaults=True)
        print("bench, old defaults :", old.get("figures") or old, flush=True)
    table = summary_table(eq, tri, off, on, hf, same_workload=True, old=old, hf_fwd=hf_fwd)
    res["passed"] = ok = passed(eq, tri, off, on)
    res["seconds"] = args.budget_s - budget.left()
    text = f"{head}\n\n{table}\n\n{'PASSED' if ok else 'FAILED'} in {res['seconds']:.0f} s of {args.budget_s:.0f}\n"
    (args.out / "gpu_check.txt").write_text(text)
    (args.out / "gpu_check.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print("\n" + text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
