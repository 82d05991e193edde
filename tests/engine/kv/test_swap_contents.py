"""A completed swap-out and swap-in, end to end through the engine and the fake runner's paged
cache: every block of a swapped-out request holds distinct KV contents (its own token ids, one
per slot), its GPU blocks are overwritten while it is out, and after the swap-in each of its
blocks holds, slot by slot, exactly what it held before the swap-out."""
from __future__ import annotations

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import RequestStatus, SamplingParams
from tests.support.fake_runner import FakeRunner, reference_output

BS = 4
CONFIG = EngineConfig(block_size=BS, num_gpu_blocks=10, max_model_len=40, max_num_seqs=3,
                      max_num_batched_tokens=32, preemption_mode="swap", num_cpu_blocks=12,
                      check_invariants=True)
GARBAGE = -7


def test_swap_out_and_in_restore_every_block_slot_by_slot():
    runner = FakeRunner(CONFIG.num_gpu_blocks, BS, num_cpu_blocks=CONFIG.num_cpu_blocks)
    engine = LLMEngine(CONFIG, runner, CONFIG.num_gpu_blocks)
    done = engine.collect_finished()
    prompts = {rid: [100 * (i + 1) + t for t in range(9)] for i, rid in enumerate("abc")}
    for rid, prompt in prompts.items():          # 9 + 12 tokens each: 6 blocks, 18 > 10 blocks
        engine.add_request(prompt, SamplingParams(max_tokens=12), request_id=rid)
    kv = engine.scheduler.kv
    before: dict[str, list[list[int]]] = {}      # swapped-out request -> its blocks' contents
    swapped_in: set[str] = set()
    num_swapped_out = num_swapped_in = 0
    while engine.has_unfinished:
        live = {rid: (r.num_computed_tokens, list(kv.block_ids(rid)))
                for rid, r in engine.requests.items() if r.status is RequestStatus.RUNNING}
        snapshot = {rid: [list(runner.cache[b]) for b in blocks] for rid, (_, blocks) in live.items()}
        rec = engine.step()
        for ev in rec.events:
            if ev.kind == "preempted" and engine.requests.get(ev.request_id) is not None \
                    and engine.requests[ev.request_id].status is RequestStatus.SWAPPED:
                rid = ev.request_id
                computed, blocks = live[rid]
                num_full = computed // BS
                before[rid] = snapshot[rid][:-(-computed // BS)]
                assert len(set(map(tuple, before[rid]))) == len(before[rid]), "contents not distinct"
                assert all(None not in c for c in before[rid][:num_full])
                held = {b for t in kv.block_tables.values() for b in t}
                for b in set(blocks) - held:  # its freed GPU blocks no one took yet: clobbered
                    runner.cache[b] = [GARBAGE] * BS
                num_swapped_out += 1
        for rid in list(before):
            req = engine.requests.get(rid)
            if rid not in swapped_in and req is not None and req.status is RequestStatus.RUNNING:
                # swapped in this step: compare block by block, slot by slot, the slots it had computed
                table = kv.block_ids(rid)
                for i, old in enumerate(before[rid]):
                    new = runner.cache[table[i]]
                    assert [t for t in old if t is not None] == new[:len([t for t in old if t is not None])], (
                        f"{rid} block {i} (GPU block {table[i]}): {new} after swap-in, {old} before")
                swapped_in.add(rid)
                num_swapped_in += 1
        assert rec.step < 500
    assert num_swapped_out >= 1 and num_swapped_in == num_swapped_out and swapped_in == set(before)
    assert runner.num_swapped_blocks >= 2 * sum(len(b) for b in before.values())
    for rid, prompt in prompts.items():
        assert done[rid].status is RequestStatus.FINISHED_LENGTH
        assert done[rid].output_token_ids == reference_output(prompt, 12)
