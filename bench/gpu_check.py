"""GPU check, one command, installs nothing (run it on the lent H200 through the device tool):

    python bench/gpu_check.py            # ~6-7 minutes on an H200, at most 8 (BUDGET_S)

1. Output equality (fp32): 16 mixed-length greedy requests through the engine together, with
   chunked prefill and recompute preemption, vs transformers `generate()` on each alone, on the GPU;
   once eager and once with CUDA graphs for the decode-only steps (``--cuda-graphs on``).
2. Triton paged-attention kernels vs the torch reference (``bench/triton_check.py``, bf16).
3. ``batchscope bench`` on the anchor workload of ../shared/bench/README.md (random-weight
   Llama-3.2-1B shape, bf16, 512 requests at t=0, EOS off), recording off, then on.
4. The peers in the same call: ``hf_peer.py`` of ../shared/bench (HF continuous batching at its best
   setting, CUDA graphs on); the device tool sends only the repository, so copy that file into
   ``shared/bench/`` of the checkout (or give ``--peer PATH``); without it the row says so.
5. ``batchscope bench`` on the anchor, recording off, with ``--cuda-graphs on`` (graphs captured
   at start-up): last, and only when the budget still has room for it.
6. Optionally (``--replay``) a headless replay of Azure conv requests on the same architecture.
Prints one table at the end. ``--device cpu --small`` runs the same code paths on a CPU (tiny model,
16 anchor requests, the Triton interpreter, ``hf_peer.py --tiny``). ``--cpu-smoke`` is the quickest
such run (what CI runs, to prove the script itself does not crash): every stage once on tiny shapes,
and the stages that need CUDA (real CUDA graphs, compiled Triton kernels) say "skipped: no CUDA" in
the final table.
"""
from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from engine.config import EngineConfig  # noqa: E402
from engine.runner.cuda_graphs import decode_backend, enable_cuda_graphs  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.runner.model_runner import ModelRunner  # noqa: E402
from engine.runner.attention.triton_attention import triton_available  # noqa: E402
from engine.request import SamplingParams  # noqa: E402

BUDGET_S = 8 * 60               # the whole check, as lent
TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def make_engine(model, *, num_blocks: int, graphs_backend: str | None = None, **knobs) -> LLMEngine:
    cfg = EngineConfig(num_gpu_blocks=num_blocks, clock="virtual", **knobs)
    runner = ModelRunner.from_config(model, cfg)
    enable_cuda_graphs(runner, cfg, progress=False, backend=graphs_backend)
    return LLMEngine(cfg, runner, num_blocks)


def check_equality(device: str, small: bool, num_requests: int = 16) -> dict:
    """Greedy engine outputs == per-request generate(), fp32, for ``num_requests`` mixed-length
    requests: eager, with CUDA graphs on over the torch reference attention, and on CUDA with
    triton installed also with graphs over our Triton decode kernel."""
    cfg = LlamaConfig(hidden_size=128 if small else 512, intermediate_size=256 if small else 1536,
                      num_hidden_layers=2 if small else 6, num_attention_heads=4 if small else 8,
                      num_key_value_heads=2, vocab_size=1000 if small else 32000, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.float32).eval()
    rng = random.Random(1)
    reqs = [([rng.randint(3, cfg.vocab_size - 1) for _ in range(rng.randint(5, 120))], rng.randint(4, 24))
            for _ in range(num_requests)]
    runs = {}
    modes = [(False, None), (True, "reference")]
    skipped = None if device.startswith("cuda") else "no CUDA"
    if skipped is None and not triton_available():
        skipped = "triton not installed"
    if skipped is None:
        modes.append((True, "triton"))
    for graphs, backend in modes:
        eng = make_engine(model, num_blocks=20, block_size=8, max_num_batched_tokens=64, max_num_seqs=16,
                          cuda_graphs=graphs, graphs_backend=backend)
        done = eng.collect_finished()
        for i, (p, o) in enumerate(reqs):
            eng.add_request(p, SamplingParams(max_tokens=o, ignore_eos=True), request_id=f"r{i}")
        runs[backend if backend == "triton" else graphs] = (done, eng.run_until_done())
    done, recs = runs[False]
    preemptions = sum(r.num_preemptions for r in recs)
    equal = dict.fromkeys(runs, 0)
    model.set_attn_implementation("sdpa")      # the reference runs transformers' own attention
    with torch.inference_mode():
        for i, (p, o) in enumerate(reqs):
            ref = model.generate(torch.tensor([p], device=device), max_new_tokens=o, do_sample=False,
                                 eos_token_id=-1, pad_token_id=0)[0, len(p):].tolist()
            for mode, (d, _) in runs.items():
                equal[mode] += ref == d[f"r{i}"].output_token_ids
    rejected = sum(d[f"r{i}"].status.value == "FINISHED_ERROR" for d, _ in runs.values() for i in range(len(reqs)))
    out = {"equal": equal[False], "equal_graphs": equal[True], "requests": len(reqs), "preemptions": preemptions,
           "steps": len(recs), "rejected": rejected}
    if "triton" in equal:
        out["equal_graphs_triton"] = equal["triton"]
    else:
        out["graphs_triton_skipped"] = f"skipped: {skipped}"
    return out


def azure_rows(n: int) -> list[tuple[int, int]]:
    """(prompt, output) token counts of the first n conv rows (the shipped 400-row slice when
    ../shared is not there)."""
    path = TRACE if TRACE.is_file() else Path(__file__).resolve().parents[1] / "recordings" / "workloads" / "data" / "azure_conv_demo.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))[:n]
    return [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows]


def replay(device: str, small: bool, n: int) -> dict:
    """Headless replay in bf16 (fp32 on CPU) of n Azure conv requests, prompts <= 1024, outputs <= 256."""
    if small:
        cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096)
    else:
        cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                          num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                          tie_word_embeddings=True, rope_theta=500000.0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    rng = random.Random(0)
    work = [([rng.randint(10, cfg.vocab_size - 10) for _ in range(max(8, min(1024, p)))], max(4, min(256, o)))
            for p, o in azure_rows(n)]
    eng = make_engine(model, num_blocks=4096, block_size=16, max_num_batched_tokens=2048, max_num_seqs=128,
                      max_model_len=2048)
    eng.add_request(work[0][0], SamplingParams(max_tokens=4, ignore_eos=True), request_id="warmup")
    eng.run_until_done()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    done = eng.collect_finished()
    for i, (p, o) in enumerate(work):
        eng.add_request(p, SamplingParams(max_tokens=o, ignore_eos=True), request_id=f"w{i}")
    recs = eng.run_until_done()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = sum(done[f"w{i}"].num_output_tokens for i in range(len(work)))
    ttft = sorted(done[f"w{i}"].ttft for i in range(len(work)))
    fwd = sum(r.forward_ns for r in recs) / 1e9
    return {"requests": len(work), "prompt_tokens": sum(len(p) for p, _ in work), "out_tokens": out,
            "run_s": dt, "out_tok_per_s": out / dt, "steps": len(recs), "steps_per_s": len(recs) / dt,
            "forward_share": fwd / dt, "ttft_steps_p50": statistics.median(ttft),
            "ttft_steps_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
            "preemptions": sum(r.num_preemptions for r in recs)}


ROOT = Path(__file__).resolve().parents[1]
PEER_PLACES = (ROOT / "shared" / "bench" / "hf_peer.py", ROOT.parent / "shared" / "bench" / "hf_peer.py")


def run_tool(argv: list[str], timeout_s: float, env: dict | None = None) -> tuple[int | None, float, str]:
    """Run ``argv`` (a Python script or module of this repository) in a child process from the
    repository root; returns (exit code or None on timeout, seconds, its output's last 2,000
    characters)."""
    import os
    import subprocess

    t = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-2000:]
        return None, time.perf_counter() - t, out.decode(errors="replace") if isinstance(out, bytes) else out
    return done.returncode, time.perf_counter() - t, (done.stdout + done.stderr)[-2000:]


def bench(small: bool, device: str, record: str | None, json_out: Path, timeout_s: float,
          cuda_graphs: bool = False, limit: int = 16) -> dict:
    """``batchscope bench`` on the anchor workload (``--small --limit <limit>`` for a CPU smoke run),
    recording to ``record`` or off, ``--cuda-graphs on`` if ``cuda_graphs``; returns its --json
    figures, or ``error``."""
    argv = ["-m", "app.cli", "bench", "--device", device, "--json", str(json_out)]
    argv += ["--cuda-graphs", "on"] if cuda_graphs else []
    argv += ["--small", "--limit", str(limit)] if small else []
    argv += ["--record", record] if record else ["--no-record"]
    rc, secs, tail = run_tool(argv, timeout_s)
    if rc != 0:
        return {"error": f"exit {rc} after {secs:.0f} s: {tail[-600:]}"}
    import json
    return json.loads(json_out.read_text())


def peer(small: bool, peer_path: Path | None, variants: str, out_dir: Path, timeout_s: float) -> dict:
    """``hf_peer.py`` (HF transformers continuous batching on the anchor workload; ``--tiny`` when
    small) with its JSON written to ``out_dir/anchor.json``; returns that JSON, or ``error``."""
    if peer_path is None:
        return {"error": "hf_peer.py not found (copy ../shared/bench/hf_peer.py to shared/bench/ or give --peer)"}
    argv = [str(peer_path), "--skip-static", "--cb-variants", variants] + (["--tiny"] if small else ["--n", "512"])
    rc, secs, tail = run_tool(argv, timeout_s, env={"OUT": str(out_dir)})
    if rc != 0:
        return {"error": f"exit {rc} after {secs:.0f} s: {tail[-600:]}"}
    import json
    return json.loads((out_dir / "anchor.json").read_text())


def triton(small: bool, device: str, timeout_s: float, iters: int | None = None) -> dict:
    """``bench/triton_check.py`` (kernels vs the torch reference; ``iters`` timed calls per case,
    0 for correctness only, None for its default); returns ok, seconds, its last lines and ``device``."""
    argv = ["bench/triton_check.py", "--device", device] + (["--small"] if small else [])
    rc, secs, tail = run_tool(argv + ([] if iters is None else ["--iters", str(iters)]), timeout_s)
    return {"ok": rc == 0, "rc": rc, "seconds": secs, "tail": tail, "device": device}


def bench_cells(res: dict) -> list:
    """A table row's figures of one ``batchscope bench`` result."""
    if "error" in res:
        return [res["error"][:60]] + [""] * 6
    f = res["figures"]
    ms = lambda v: "n/a" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    return [f"{f['output_tokens_per_s']:,.0f}", f"{ms(f['ttft_p50_s'])} / {ms(f['ttft_p99_s'])}",
            f"{ms(f['tpot_p50_s'])} / {ms(f['tpot_p99_s'])}", f"{f['steps_per_s']:,.1f}",
            f"{f['roofline_efficiency']:.1%}", f"{f['duration_s']:.1f}", f"{f['num_output_tokens']:,}"]


def graphs_equality(eq: dict) -> str:
    """``(a/n with CUDA graphs[, b/n with graphs + Triton decode])`` of a :func:`check_equality` result."""
    n = eq["requests"]
    triton = (f", {eq['equal_graphs_triton']}/{n} with graphs + Triton decode" if "equal_graphs_triton" in eq
              else f", graphs + Triton decode: {eq['graphs_triton_skipped']}" if "graphs_triton_skipped" in eq else "")
    return f"({eq.get('equal_graphs', 0)}/{n} with CUDA graphs{triton})"


def summary_table(eq: dict, tri: dict, off: dict, on: dict, hf: dict, same_workload: bool = True,
                  graphs: dict | None = None) -> str:
    """The final table: one row per system, then the checks. ``same_workload`` False (``--small``:
    hf_peer.py --tiny draws its own requests) leaves out the engine / HF ratio. ``graphs``: the
    bench with CUDA graphs on (recording off), when it ran."""
    from tabulate import tabulate

    rows = [["BatchScope bench, recording off", *bench_cells(off)],
            ["BatchScope bench, recording on", *bench_cells(on)]]
    if graphs is not None:
        rows.append(["BatchScope bench, CUDA graphs on", *bench_cells(graphs)])
    best = None
    for key, value in hf.items():
        if key.startswith("hf_cb") and isinstance(value, dict):
            if "error" in value:
                rows.append([key, value["error"][:60]] + [""] * 6)
                continue
            rows.append([key, f"{value['out_tok_per_s']:,.0f}", "", "", "", "", f"{value['run_s']:.1f}",
                         f"{value['out_tokens']:,}"])
            best = max(best or 0.0, value["out_tok_per_s"])
    if "error" in hf:
        rows.append(["HF peer", hf["error"][:60]] + [""] * 6)
    table = tabulate(rows, headers=["system", "out tok/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "steps/s",
                                    "roofline eff.", "run s", "out tokens"], disable_numparse=True)
    lines = [table, ""]
    fig_off, fig_on = off.get("figures"), on.get("figures")
    if fig_off and best and same_workload:
        lines.append(f"engine / HF best: {fig_off['output_tokens_per_s'] / best:.1f}x (target >= 10x on the H200)")
    if fig_off and fig_on:
        lines.append(f"recording cost: {1 - fig_on['output_tokens_per_s'] / fig_off['output_tokens_per_s']:.1%} "
                     "of throughput (target < 5%)")
    peaks = off.get("peaks") or on.get("peaks")
    if peaks:
        lines.append(f"peaks measured by bench: {peaks['peak_flops'] / 1e12:.4g} TFLOP/s, "
                     f"{peaks['mem_bandwidth'] / 1e12:.3g} TB/s copy"
                     + (f"; by hf_peer: {hf['bf16_TFLOPs']:.4g} TFLOP/s, {hf['copy_TBps_rw']:.3g} TB/s"
                        if "bf16_TFLOPs" in hf else ""))
    fig_graphs = (graphs or {}).get("figures")
    if fig_off and fig_graphs:
        lines.append(f"CUDA graphs on / off: {fig_graphs['output_tokens_per_s'] / fig_off['output_tokens_per_s']:.2f}x "
                     f"output tokens/s (recording off; graphs' decode attention: {graphs.get('backend', '?')})")
    lines.append(f"equality fp32: {eq['equal']}/{eq['requests']} token-identical to generate() {graphs_equality(eq)}; "
                 f"triton kernels: {'ok' if tri['ok'] else 'FAILED (exit ' + str(tri['rc']) + ')'} "
                 f"({tri['seconds']:.0f} s" + ("" if tri.get("device", "cuda") == "cuda" else
                                                "; Triton interpreter, compiled kernels: skipped: no CUDA") + ")")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny models, for a CPU smoke run")
    ap.add_argument("--peer", type=Path, help="hf_peer.py (default: shared/bench/ in or beside the repository)")
    ap.add_argument("--peer-variants", help="hf_peer.py --cb-variants (default: graphs on a GPU, default on a CPU)")
    ap.add_argument("--replay", action="store_true", help="also the headless Azure replay")
    ap.add_argument("--n", type=int, default=256, help="requests in the replay (default: %(default)s)")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="= --device cpu --small, each stage once on the fewest requests (CI: the script runs); "
                         "the stages that need CUDA are reported as skipped")
    args = ap.parse_args(argv)
    if args.cpu_smoke:
        args.device, args.small = "cpu", True
    smoke = args.cpu_smoke
    started = time.perf_counter()
    gpu = args.device.startswith("cuda")
    print(f"torch {torch.__version__}  device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if gpu else ""), flush=True)
    t = time.perf_counter()
    eq = check_equality(args.device, args.small, num_requests=4 if smoke else 16)
    print(f"equality fp32 : {eq['equal']}/{eq['requests']} requests token-identical to generate() "
          f"{graphs_equality(eq)}, "
          f"{eq['preemptions']} preemptions, {eq['rejected']} rejected, {eq['steps']} steps "
          f"({time.perf_counter() - t:.1f} s)", flush=True)
    if gpu:
        torch.cuda.empty_cache()       # the children below need the GPU's memory
    tri = triton(args.small, "cuda" if gpu else "cpu", timeout_s=150, iters=0 if smoke else None)
    print(f"triton kernels: {'ok' if tri['ok'] else 'FAILED'} ({tri['seconds']:.0f} s)\n{tri['tail'][-1500:]}",
          flush=True)
    peer_path = args.peer or next((p for p in PEER_PLACES if p.is_file()), None)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        limit = 4 if smoke else 16
        off = bench(args.small, args.device, None, d / "off.json", timeout_s=150, limit=limit)
        print("bench, recording off:", off.get("figures") or off, flush=True)
        on = bench(args.small, args.device, str(d / "on.sqlite"), d / "on.json", timeout_s=150, limit=limit)
        print("bench, recording on :", on.get("figures") or on, flush=True)
        hf = peer(args.small, peer_path, args.peer_variants or ("graphs" if gpu else "default"), d, timeout_s=200)
        left = BUDGET_S - (time.perf_counter() - started) - 10
        if smoke:                       # the padded decode path itself ran eagerly in the equality check
            graphs = {"error": "skipped: no CUDA (no graphs to capture)"}
        elif left >= 45:
            graphs = bench(args.small, args.device, None, d / "graphs.json", timeout_s=min(150.0, left),
                           cuda_graphs=True)
            graphs["backend"] = decode_backend(torch.device(args.device))   # the child's rule, same env
        else:
            graphs = {"error": f"skipped: {max(0.0, left):.0f} s left of the {BUDGET_S // 60}-minute budget"}
        print("bench, CUDA graphs  :", graphs.get("figures") or graphs, flush=True)
    if args.replay:
        rp = replay(args.device, args.small, args.n)
        print("replay        : " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in rp.items()))
    print()
    print(summary_table(eq, tri, off, on, hf, same_workload=not args.small, graphs=graphs))
    ok = (eq["equal"] == eq["requests"] == eq["equal_graphs"] == eq.get("equal_graphs_triton", eq["requests"])
          and tri["ok"] and "error" not in off and "error" not in on)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
