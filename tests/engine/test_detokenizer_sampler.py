"""IncrementalDetokenizer (streaming, stop strings, split UTF-8) and Sampler (greedy, top-k, top-p,
per-request seeds) in isolation."""
from __future__ import annotations

import pytest
import torch

from engine.detokenizer import IncrementalDetokenizer
from engine.request import SamplingParams
from engine.runner.sampler import Sampler
from tests.support.fake_runner import ToyTokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine


class ByteTokenizer:
    """Token id = one UTF-8 byte; a character split across tokens decodes to U+FFFD until complete."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def feed(det, tokens):
    out, ids = [], []
    for t in tokens:
        ids.append(t)
        out.append(det.update(ids))
    return out


def test_streams_every_character_without_stop_strings():
    det = IncrementalDetokenizer(ToyTokenizer({1: "ab", 2: "c", 3: "de"}))
    assert feed(det, [1, 2, 3]) == [("ab", None), ("c", None), ("de", None)]
    assert det.flush() == "" and det.output_text == "abcde" == det.streamed_text


def test_holds_back_what_could_start_a_stop_string():
    det = IncrementalDetokenizer(ToyTokenizer({1: "ab", 2: "c", 3: "de", 4: "X"}), stop=("xyz",))
    deltas = feed(det, [1, 2, 3])
    assert [d for d, _ in deltas] == ["", "a", "bc"]          # the last 2 characters wait
    assert det.streamed_text == "abc" and det.output_text == "abcde"
    assert det.flush() == "de" and det.streamed_text == "abcde"


def test_earliest_stop_string_wins_and_is_cut():
    # Both stop strings complete in the same token; the one that starts first wins.
    det = IncrementalDetokenizer(ToyTokenizer({1: "AB", 2: "CDEFGH"}), stop=("FG", "CDE"))
    assert feed(det, [1, 2]) == [("", None), ("AB", "CDE")]
    assert det.output_text == "AB" and det.flush() == ""


def test_include_stop_string_keeps_it():
    det = IncrementalDetokenizer(ToyTokenizer({1: "AB", 2: "C", 3: "DE"}), stop=("BCD",), include_stop=True)
    *_, (delta, stop) = feed(det, [1, 2, 3])
    assert stop == "BCD" and det.output_text == "ABCD"
    assert det.streamed_text == "ABCD"


def test_split_utf8_character_is_never_streamed_half():
    word = "né€".encode()                                       # 1 + 2 + 3 bytes
    det = IncrementalDetokenizer(ByteTokenizer())
    deltas = [d for d, _ in feed(det, list(word))]
    assert "".join(deltas) == "né€" and "\ufffd" not in "".join(deltas)
    assert deltas == ["n", "", "é", "", "", "€"]


def test_stop_string_made_of_multibyte_characters():
    det = IncrementalDetokenizer(ByteTokenizer(), stop=("é€",))
    results = feed(det, list("aé€b".encode()))
    stops = [s for _, s in results if s]
    assert stops == ["é€"] and det.output_text == "a"


class SentencePieceLike:
    """Pieces with a leading-space marker that decode drops at the start of the text (as
    SentencePiece tokenizers do); counts the ids it decodes."""

    def __init__(self) -> None:
        self.decoded_ids = 0

    def decode(self, ids, skip_special_tokens=True):
        self.decoded_ids += len(ids)
        return "".join(" w" + str(i) for i in ids).removeprefix(" ")


def test_windowed_decoding_gives_the_whole_decode_and_costs_the_window_not_the_output():
    tok = SentencePieceLike()
    det = IncrementalDetokenizer(tok)
    ids = list(range(1, 401))
    deltas = [d for d, _ in feed(det, ids)]
    assert "".join(deltas) == det.output_text == SentencePieceLike().decode(ids)    # spaces in context
    assert tok.decoded_ids < 4 * len(ids)           # whole-output decoding would be ~ len(ids)**2 / 2


# --- sampler ------------------------------------------------------------------------------------
def logits(rows=3, vocab=50, seed=0):
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))


def test_greedy_is_argmax():
    lg = logits()
    assert Sampler().sample(lg, [SamplingParams()] * 3) == lg.argmax(-1).tolist()


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.5, top_k=1),
                                    SamplingParams(temperature=1.5, top_p=1e-6)])
def test_top_k_1_and_tiny_top_p_keep_only_the_most_likely(params):
    s = Sampler()
    lg = logits(rows=1)
    assert all(s.sample(lg, [params], [i]) == [int(lg[0].argmax())] for i in range(20))


def test_top_k_samples_only_among_the_k_best():
    s = Sampler(base_seed=3)
    lg = logits(rows=1, vocab=100)
    best = set(lg[0].topk(3).indices.tolist())
    seen = {s.sample(lg, [SamplingParams(temperature=5.0, top_k=3)], [i])[0] for i in range(200)}
    assert seen <= best and len(seen) > 1


def test_seeded_request_is_reproducible_whatever_else_is_in_the_batch():
    p = SamplingParams(temperature=1.0, seed=7)
    lg = logits(rows=1, vocab=200)
    alone = Sampler()
    seq_alone = [alone.sample(lg, [p], [i])[0] for i in range(10)]
    busy = Sampler(base_seed=99)
    others = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, seed=1), SamplingParams()]
    batch = torch.cat([logits(rows=3, vocab=200, seed=5), lg])
    seq_busy = [busy.sample(batch, others + [p], [7, 0, 3, i])[3] for i in range(10)]
    assert seq_busy == seq_alone
    assert len(set(seq_alone)) > 1                                 # it really samples
    # The counter is the position in the stream: the same counters give the same tokens again.
    assert [alone.sample(lg, [p], [i])[0] for i in range(10)] == seq_alone


def test_unseeded_rows_draw_streams_derived_from_the_base_seed():
    lg = logits(rows=2, vocab=200)
    p = [SamplingParams(temperature=1.0)] * 2

    def run(base_seed):
        return [Sampler(base_seed).sample(lg, p, [i, i]) for i in range(12)]

    assert run(4) == run(4)
    assert run(4) != run(5)
    assert [a for a, _ in run(4)] != [b for _, b in run(4)]       # each row a stream of its own
