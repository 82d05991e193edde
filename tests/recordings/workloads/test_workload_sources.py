"""Workload sources: Poisson arrivals (``--request-rate``), the shipped ShareGPT length table
(``--lengths sharegpt``) and resampling a trace's arrivals without losing its hash ids."""
from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from tests.support.shared_traces import MOONCAKE, traces_dir  # noqa: F401

from recordings.workloads.length_tables import TABLES, load_length_table
from recordings.workloads.poisson import arrival_note, poisson_arrivals, with_poisson_arrivals
from recordings.workloads.traces import TraceRow, load_trace
from recordings.workloads.workload import build_workload

N = 2000


def test_poisson_arrivals_are_seeded_and_reproducible():
    a = poisson_arrivals(N, 5.0, seed=3)
    assert a.shape == (N,) and a.dtype == np.float64
    assert np.array_equal(a, poisson_arrivals(N, 5.0, seed=3))
    assert not np.array_equal(a, poisson_arrivals(N, 5.0, seed=4))
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)


@pytest.mark.parametrize("rate, seed", [(5.0, 0), (0.25, 1), (300.0, 2)])
def test_poisson_gaps_have_the_exponential_mean_and_spread(rate, seed):
    gaps = np.diff(poisson_arrivals(N, rate, seed))
    n = len(gaps)
    mean = 1 / rate                                  # an exponential gap: mean = std = 1 / rate
    assert abs(gaps.mean() - mean) < 5 * mean / math.sqrt(n)
    # coefficient of variation 1 (not a uniform or fixed spacing): its standard error for an
    # exponential sample is sqrt((kurtosis 9 - 1) / (4 n))
    assert abs(gaps.std() / gaps.mean() - 1) < 5 * math.sqrt(8 / (4 * n))
    # memoryless: P(gap > mean) = 1/e, binomial bound
    share = (gaps > mean).mean()
    assert abs(share - math.exp(-1)) < 5 * math.sqrt(math.exp(-1) * (1 - math.exp(-1)) / n)


def test_infinite_rate_sends_everything_at_once_and_bad_rates_are_refused():
    assert np.array_equal(poisson_arrivals(50, math.inf), np.zeros(50))
    assert len(poisson_arrivals(0, 2.0)) == 0 and list(poisson_arrivals(1, 2.0)) == [0.0]
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="--request-rate must be > 0"):
            poisson_arrivals(10, bad)
    assert "all 7 requests arrive at t=0" in arrival_note(7, math.inf, 0)
    note = arrival_note(7, 2.5, 9, "the trace's timestamps")
    assert "2.5 requests/s" in note and "seed 9" in note and note.endswith("the trace's timestamps")


def test_resampled_rows_keep_lengths_hash_ids_and_lines():
    rows = [TraceRow(i + 1, 100.0 * i, 1100 + i, 3, (0, 1, i + 2)) for i in range(30)]   # 3 blocks each
    out = with_poisson_arrivals(rows, 4.0, seed=7)
    assert [r.arrival_s for r in out] == poisson_arrivals(30, 4.0, seed=7).tolist()
    assert [(r.line_no, r.num_prompt_tokens, r.num_output_tokens, r.hash_ids) for r in out] == \
        [(r.line_no, r.num_prompt_tokens, r.num_output_tokens, r.hash_ids) for r in rows]
    workload = build_workload(out, None, block_size=16)
    assert workload.prefix_sharing.num_hash_ids == 90 and workload.prefix_sharing.num_hash_ids_unused == 0


def test_real_mooncake_resampled_keeps_its_ideal_hit_rate(traces_dir):
    rows = load_trace(traces_dir / MOONCAKE).rows
    before = build_workload(rows, None, prompt_scale=1 / 32, block_size=16).prefix_sharing
    after = build_workload(with_poisson_arrivals(rows, 2.0), None, prompt_scale=1 / 32,
                           block_size=16).prefix_sharing
    assert after.num_hash_ids == before.num_hash_ids == sum(len(r.hash_ids) for r in rows)
    assert after.trace_ideal_hit_rate == pytest.approx(0.640, abs=0.001)


# --- the ShareGPT length table ------------------------------------------------------------------

def test_shipped_sharegpt_table_is_the_two_count_columns_of_the_shared_file(traces_dir):
    table = load_length_table("sharegpt")
    source = traces_dir / "length-dists" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    with source.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(table) == len(rows) == 30731
    assert table.num_prompt_tokens.tolist() == [int(r["num_prefill_tokens"]) for r in rows]
    assert table.num_output_tokens.tolist() == [int(r["num_decode_tokens"]) for r in rows]
    # the dropped columns are derived ones
    assert all(int(r["num_total_tokens"]) == int(r["num_prefill_tokens"]) + int(r["num_decode_tokens"])
               for r in rows)


def test_sharegpt_sampling_is_seeded_and_follows_the_table():
    table = load_length_table("sharegpt")
    with TABLES["sharegpt"].open(newline="") as f:
        lines = f.read().splitlines()              # lines[k - 1] is line k of the file
    rows = table.sample(N, seed=5)
    assert rows == table.sample(N, seed=5) and rows != table.sample(N, seed=6)
    for r in rows[:200]:                           # each draw is the table row its line_no names
        assert lines[r.line_no - 1] == f"{r.num_prompt_tokens},{r.num_output_tokens}"
        assert r.arrival_s == 0.0 and r.hash_ids == () and r.spec is None
    prompts = np.array([r.num_prompt_tokens for r in rows], float)
    mean, std = table.num_prompt_tokens.mean(), table.num_prompt_tokens.std()
    assert abs(prompts.mean() - mean) < 5 * std / math.sqrt(N)
    assert len({r.line_no for r in rows}) > N * 0.9   # with replacement, from 30,731 rows


def test_bad_table_requests_are_refused():
    with pytest.raises(ValueError, match="known: sharegpt"):
        load_length_table("alpaca")
    with pytest.raises(ValueError, match="--num-requests must be >= 1"):
        load_length_table("sharegpt").sample(0)
