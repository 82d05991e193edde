"""The offline Python API (``app.llm.LLM``) on the tiny random Llama, torch on one thread."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from app import LLM, SamplingParams
from engine.config import ConfigError
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)
PROMPTS = [[5, 6, 7, 8], list(range(30, 70)), [9, 10, 11], [12] * 20, list(range(100, 117))]


@pytest.fixture(scope="module")
def llm(tiny_model):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    # 3 slots and 12 blocks of 8 tokens: the 5 prompts do not all fit at once
    yield LLM(tiny_model, max_num_seqs=3, num_gpu_blocks=12, block_size=8, max_num_batched_tokens=32)
    torch.set_num_threads(n)


def hf_greedy(model_folder, prompt, max_tokens: int) -> list[int]:
    """transformers ``generate()`` on one prompt alone (the reference)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_tokens, eos_token_id=-1, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_outputs_come_back_in_input_order_with_unique_ids(llm, tiny_model):
    first = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    again = llm.generate(PROMPTS[::-1], GREEDY, use_tqdm=False)
    assert [o.prompt_token_ids for o in first] == PROMPTS
    assert [o.token_ids for o in again] == [o.token_ids for o in first][::-1]
    ids = [o.request_id for o in first + again]
    assert len(set(ids)) == len(ids) == 2 * len(PROMPTS)               # unique across calls
    assert first[1].token_ids == hf_greedy(tiny_model, PROMPTS[1], GREEDY.max_tokens)
    for o in first:
        assert o.finish_reason == "length" and len(o.token_ids) == 6 and o.error is None
        assert o.text is None and o.prompt is None                     # no tokenizer: ids only
        m = o.metrics
        assert 0 < m.time_to_first_token <= m.e2e_request_latency and m.time_per_output_token > 0
        assert m.finished_time - m.arrival_time == m.e2e_request_latency


def test_one_prompt_and_per_prompt_sampling_params(llm):
    (single,) = llm.generate([5, 6, 7, 8], GREEDY, use_tqdm=False)    # a list of ints is one prompt
    assert single.prompt_token_ids == [5, 6, 7, 8]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (1, 4, 9)]
    outs = llm.generate(PROMPTS[:3], params, use_tqdm=False)
    assert [len(o.token_ids) for o in outs] == [1, 4, 9]
    assert outs[0].token_ids == single.token_ids[:1]
    with pytest.raises(ValueError, match=r"one per prompt \(3 prompts, got 2 items\)"):
        llm.generate(PROMPTS[:3], params[:2], use_tqdm=False)
    assert llm.generate([], GREEDY, use_tqdm=False) == []


def test_sampling_params_reach_the_sampler(llm):
    plain, penalized = (llm.generate([[12] * 20], SamplingParams(max_tokens=12, ignore_eos=True, **kw),
                                     use_tqdm=False)[0].token_ids
                        for kw in ({}, {"repetition_penalty": 1.5, "presence_penalty": 1.0}))
    assert plain != penalized
    seeded = SamplingParams(max_tokens=8, temperature=1.0, seed=5, ignore_eos=True)
    a, b = (llm.generate(PROMPTS[:2], seeded, use_tqdm=False)[1].token_ids for _ in range(2))
    assert a == b


def test_record_writes_a_recording_that_opens(llm, tmp_path):
    path = tmp_path / "run.sqlite"
    outs = llm.generate(PROMPTS, GREEDY, record=path, use_tqdm=False)
    with open_reader(path) as reader:
        assert reader.is_complete()
        assert reader.request_ids() == [o.request_id for o in outs]
        for o in outs:
            info = reader.request_info(o.request_id)
            assert list(info.prompt_token_ids) == o.prompt_token_ids and info.num_output_tokens == len(o.token_ids)
            assert info.is_finished
        records = reader.records(0, reader.latest_step() + 1)
        assert records[0].step == 0 and len(reader.state_at(reader.latest_step())) == 0
        assert max(len(r.scheduled) for r in records) == 3             # the batch was full
        assert reader.run_info().config["num_gpu_blocks"] == 12
    tokens = {}
    for rec in records:
        for t in rec.new_tokens:
            tokens.setdefault(t.request_id, []).append(t.token_id)
    assert tokens == {o.request_id: o.token_ids for o in outs}
    with pytest.raises(RecordingError, match="overwrite=True"):        # not overwritten unasked
        llm.generate(PROMPTS[:1], GREEDY, record=path, use_tqdm=False)
    again = llm.generate(PROMPTS[:1], GREEDY, record=path, overwrite=True, use_tqdm=False)
    with open_reader(path) as reader:                                       # replaced by the new call
        assert {t.request_id for r in reader.records(0, reader.latest_step() + 1)
                for t in r.new_tokens} == {again[0].request_id}


def test_a_prompt_that_cannot_fit_is_an_error_output(llm):
    outs = llm.generate([list(range(10, 200)), [5, 6]], GREEDY, use_tqdm=False)
    assert outs[0].finish_reason == "error" and "KV blocks" in outs[0].error and outs[0].token_ids == []
    assert outs[1].finish_reason == "length" and len(outs[1].token_ids) == 6


def test_parallel_sampling_returns_the_n_sequences_of_each_prompt(llm):
    params = SamplingParams(max_tokens=6, n=3, temperature=1.0, seed=11, ignore_eos=True)
    single, group = llm.generate([PROMPTS[0], PROMPTS[3]], [GREEDY, params], use_tqdm=False)
    assert single.sequences == (dataclasses.replace(single, sequences=()),)
    assert [s.request_id for s in group.sequences] == [f"{group.request_id}#{k}" for k in range(3)]
    assert group.token_ids == group.sequences[0].token_ids and group.request_id == str(int(single.request_id) + 1)
    # sequence k samples with seed + k: as a prompt of its own with that seed
    solo = [llm.generate([PROMPTS[3]], dataclasses.replace(params, n=1, seed=11 + k), use_tqdm=False)[0]
            for k in range(3)]
    assert [s.token_ids for s in group.sequences] == [o.token_ids for o in solo]
    assert len({tuple(s.token_ids) for s in group.sequences}) == 3
    (rejected,) = llm.generate([PROMPTS[3]], SamplingParams(n=4), use_tqdm=False)
    assert {s.error for s in rejected.sequences} == {"n=4 sequences take 4 batch slots but max_num_seqs is 3"}


def test_progress_bar(llm, capsys):
    llm.generate(PROMPTS[:2], GREEDY)
    assert "generating" in capsys.readouterr().err
    llm.generate(PROMPTS[:2], GREEDY, use_tqdm=False)
    assert "generating" not in capsys.readouterr().err


class CharTokenizer:
    """Token id = code point (all below the tiny model's 512)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(map(chr, ids))


def test_text_prompts_need_a_tokenizer(llm):
    with pytest.raises(ValueError, match="has no tokenizer: pass prompts as lists of token ids in \\[0, 512\\)"):
        llm.generate("hello", GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        llm.generate([[5, 6]], SamplingParams(stop=["x"]), use_tqdm=False)
    with pytest.raises(TypeError, match="prompt 1 is a float"):
        llm.generate(["a", 1.5], GREEDY, use_tqdm=False)
    llm.tokenizer = CharTokenizer()
    try:
        (out,) = llm.generate("hello", GREEDY, use_tqdm=False)
    finally:
        llm.tokenizer = None
    assert out.prompt == "hello" and out.prompt_token_ids == [ord(c) for c in "hello"]
    assert out.text == CharTokenizer().decode(out.token_ids)


def test_unknown_and_bad_knobs_are_named(tiny_model):
    with pytest.raises(TypeError, match=r"unknown engine knob 'max_num_seq' \(did you mean 'max_num_seqs'\?\); "
                                        r"known knobs: .*max_num_batched_tokens"):
        LLM(tiny_model, max_num_seq=4)
    with pytest.raises(ConfigError, match="max_num_seqs must be >= 1"):
        LLM(tiny_model, max_num_seqs=0)
    with pytest.raises(TypeError, match="need executor='sim'"):
        LLM(tiny_model, sim_device="h100")


def test_simulated_executor(tmp_path):
    llm = LLM("llama-3.1-8b", executor="sim", sim_device="h100", num_gpu_blocks=64, max_num_seqs=2)
    outs = llm.generate([[1, 2, 3], [4, 5]], GREEDY, use_tqdm=False, record=tmp_path / "sim.sqlite")
    assert [len(o.token_ids) for o in outs] == [6, 6]
    assert llm.config.clock == "sim" and outs[0].metrics.time_to_first_token > 0
    assert open_reader(tmp_path / "sim.sqlite").run_info().executor == "sim"


def test_one_engine_serves_every_call_with_prefix_reuse_and_caller_ids(tiny_model):
    llm = LLM(tiny_model, max_num_seqs=2, num_gpu_blocks=16, block_size=4, max_num_batched_tokens=32,
              enable_prefix_caching=True)
    shared = list(range(40, 57))                                        # 17 tokens: 4 full blocks
    (first,) = llm.generate([shared + [1]], GREEDY, use_tqdm=False)
    assert first.num_cached_tokens == 0
    (second,) = llm.generate([shared + [2]], GREEDY, use_tqdm=False, request_ids=["mine"])
    assert second.request_id == "mine" and second.num_cached_tokens == 16   # the first call's blocks
    alone = LLM(tiny_model, max_num_seqs=2, num_gpu_blocks=16, block_size=4, max_num_batched_tokens=32)
    assert second.token_ids == alone.generate([shared + [2]], GREEDY, use_tqdm=False)[0].token_ids
    third = llm.generate([[5, 6], [7, 8]], GREEDY, use_tqdm=False)
    ids = [first.request_id, "mine", *(o.request_id for o in third)]
    assert len(set(ids)) == 4                                          # unique across calls
    for bad, message in ((["mine"], "used by an earlier generate"), (["x", "x"], "given twice"),
                         ([""], "non-empty string"), (["a", "b", "c"], "one id per prompt"),
                         (["a#1"], "contains '#'")):
        n = len(bad) if "one id" not in message else 2
        with pytest.raises(ValueError, match=message):
            llm.generate([[5, 6]] * n, GREEDY, use_tqdm=False, request_ids=bad)
    with pytest.raises(ValueError, match="needs policy='priority'"):      # refused, nothing left behind
        llm.generate([[5, 6], [7, 8]], [GREEDY, SamplingParams(priority=1)], use_tqdm=False)
    assert not llm.engine.has_unfinished
    assert [o.request_id for o in llm.generate([[9, 9]], GREEDY, use_tqdm=False, request_ids=["z"])] == ["z"]
