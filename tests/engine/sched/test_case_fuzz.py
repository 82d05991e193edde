"""Generated scheduler cases (``case_strategies.cases``: the data format of the cases file, with
knobs, prompts sharing prefixes, parallel sampling and user actions drawn around the cases'
edges) run through the same checks as the hand-written variants (``case_runner.run_case``: G1-G7
every step from the engine and from the records, the recording read back and re-checked, the
case kinds' general expectations).

The example count is modest so CI stays fast; for a longer hunt raise it on the command line,
e.g. ``pytest tests/engine/sched/test_case_fuzz.py --hypothesis-seed=N`` with
``CASE_FUZZ_EXAMPLES=2000`` in the environment. A failure prints the case as a dict: add it to
``tests/data/cases/scheduler-case-variants.json`` as a regression variant once fixed.
"""
from __future__ import annotations

import pytest

import os

from hypothesis import HealthCheck, event, given, settings

from tests.support.case_runner import run_case
from tests.support.case_strategies import cases

EXAMPLES = int(os.environ.get("CASE_FUZZ_EXAMPLES", "25"))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@pytest.mark.slow
@given(cases())
def test_generated_cases_keep_every_check(tmp_path, case):
    result = run_case(case, tmp_path)
    kinds = {ev.kind for rec in result.records for ev in rec.events}
    for kind in sorted(kinds & {"preempted", "rejected", "paused", "resumed", "aborted", "forked"}):
        event(f"event {kind}")
    if any(rec.prefix_cache_hits for rec in result.records):
        event("prefix-cache hit")
    if any(ev.kind == "swapped_out" for rec in result.records for ev in rec.block_events):
        event("swap-out")
