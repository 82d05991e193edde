"""Rebuild the ``requests`` rows a damaged recording lost, from the step rows that still read.

A request's row holds its id, arrival, prompt length, ``max_tokens``, sampling and outcome; the
steps hold everything a replay needs of it but its static facts. ``recordings.damage.salvage``
copies every row that reads into a fresh file; where ``requests`` rows did not read (a truncated
or overwritten page of that table), :func:`rebuild_requests` writes a row for each lost arrival
number (``seq``) from the copy's own rows:

- ``arrival_step``: exact. After step ``k`` the engine has taken in ``num_waiting + num_running
  + num_paused + num_finished`` requests (``num_finished`` counts every request finished so far,
  rejections included), and ``seq`` numbers arrivals from 0, so request ``seq`` arrived at the
  first step where that count exceeds ``seq``. ``arrival_time``: that step's ``clock`` (the
  engine clock when it started: the true time is at most that, so a rebuilt TTFT may be short
  by up to a step).
- ``num_prompt_tokens``: from the first step that gave the request a token, where the token's
  index is ``num_computed_tokens + num_tokens - num_prompt_tokens`` (``token_index_json``, or 0 for
  the first token when the file derives indexes); for a request that got no token in the
  readable steps, the most tokens it had computed (a lower bound, at least 1; counted as not
  rebuilt). Schema 4 stores computed tokens relative to the prompt, so there the prompt length
  is the finishing transition's ``num_computed_tokens`` - output + 1 (a lower bound of 1 for a
  request that did not finish).
- the outcome: the step and status of its ``FINISHED_*`` transition, its error and preemptions,
  the tokens it was given; ``max_tokens`` is its output length when it finished by length, else
  the tokens it was given (a lower bound).
- TTFT and mean ITL from its tokens' ``token_time`` (as ``batchscope check`` recomputes them);
- what no step holds is said, not invented: the id becomes ``lost-<seq>``, the prompt and
  sampling are NULL (priority 0), and ``sampling_json`` carries ``{"rebuilt": [...the
  rebuilt or approximate fields...]}``.

Plain SQL and JSON over the copy (fresh, undamaged): one pass over the steps' batch arrays, indexed
reads of the transitions. No torch, no Qt.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from typing import Iterable

import sqlite_utils

from engine.request import FINISH_REASON_OF, RequestStatus
from recordings.file.compact import Batch

Range = tuple[int, int]


@dataclass
class RebuiltRequests:
    """What :func:`rebuild_requests` wrote: ``num_rebuilt`` rows, of which ``approximate`` (seq
    numbers) have a prompt length or ``max_tokens`` that is only a lower bound, and ``missing``
    (seq numbers) that arrived after the last step the copy holds (nothing to rebuild from)."""

    num_rebuilt: int = 0
    approximate: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per kind of result, for ``batchscope recover``."""
        out = []
        if self.num_rebuilt:
            out.append(f"rebuilt {self.num_rebuilt:,} request rows that did not read from their steps "
                       f"(ids lost-<seq>; arrival times within a step; no prompt text or ids, no sampling)")
        if self.approximate:
            out.append(f"could not rebuild the exact prompt length or max_tokens of {len(self.approximate):,} "
                       f"of them (seq {_spans(self.approximate)}): lower bounds kept")
        if self.missing:
            out.append(f"could not rebuild {len(self.missing):,} requests that no readable step "
                       f"names (seq {_spans(self.missing)})")
        return out


def rebuild_requests(db: sqlite_utils.Database, lost: Iterable[Range] = ()) -> RebuiltRequests:
    """Insert a ``requests`` row for every request the steps of the recording open in ``db`` (a
    fresh, writable copy) count as arrived but the copy has no row for (see the module doc),
    and report the ``seq`` numbers of the inclusive ranges ``lost`` that no step names; the
    caller commits. Raises ``sqlite3.Error`` if the copy cannot be read or written."""
    steps, arrived = [], []
    for step, count in db.execute("SELECT step, num_waiting + num_running + num_paused + num_finished "
                                  "FROM steps ORDER BY step"):
        steps.append(step)
        arrived.append(count or 0)
    for i in range(len(arrived) - 2, -1, -1):      # a count is never above a later one's
        arrived[i] = min(arrived[i], arrived[i + 1])
    have = {seq for (seq,) in db.execute("SELECT seq FROM requests")}
    named = set(range(arrived[-1])) if arrived else set()
    wanted = sorted(named - have)
    result = RebuiltRequests(missing=sorted({s for a, b in lost for s in range(a, b + 1)} - named - have))
    if not wanted:
        return result
    facts = _batch_facts(db, set(wanted))
    clock, token_time = {}, {}
    for step, c, t in db.execute("SELECT step, clock, token_time FROM steps"):
        clock[step], token_time[step] = c, t
    rows = []
    for seq in wanted:
        arrival_step = steps[bisect.bisect_right(arrived, seq)]
        fact = facts.get(seq, _Facts())
        end = _finish(db, seq)
        exact_prompt = fact.num_prompt_tokens is not None
        num_prompt = fact.num_prompt_tokens if exact_prompt else max(1, fact.max_computed)
        status, finish_step, num_preemptions, error = end or (None, None, None, None)
        given = [s for s in fact.token_steps if finish_step is None or s <= finish_step]
        num_output = len(given)
        arrival_time = clock[arrival_step]
        first, last = (token_time[given[0]], token_time[given[-1]]) if given else (None, None)
        by_length = status == RequestStatus.FINISHED_LENGTH.value
        approximate = [] if exact_prompt else ["num_prompt_tokens"]
        if not by_length:
            approximate.append("max_tokens")
        if approximate:
            result.approximate.append(seq)
        reason = FINISH_REASON_OF.get(RequestStatus(status)) if status else None
        rows.append({
            "seq": seq, "request_id": f"lost-{seq}", "arrival_step": arrival_step,
            "arrival_time": arrival_time, "num_prompt_tokens": num_prompt,
            "max_tokens": max(1, num_output), "prompt_token_ids": None, "prompt_text": None,
            "sampling_json": json.dumps({"rebuilt": ["request_id", "arrival_time", *approximate]}),
            "status": status, "finish_reason": None if reason is None else reason.value,
            "finish_step": finish_step, "num_output_tokens": num_output if status else None,
            "ttft": None if not status or first is None else first - arrival_time,
            "mean_itl": (last - first) / (num_output - 1) if status and num_output >= 2 else None,
            "num_preemptions": num_preemptions, "error": error})
    if rows:
        db["requests"].insert_all(rows)
    result.num_rebuilt = len(rows)
    return result


@dataclass
class _Facts:
    """What the batch arrays say of one request: its prompt length (when a token shows it), the
    most tokens it had computed, the steps that gave it a token."""

    num_prompt_tokens: int | None = None
    max_computed: int = 0
    token_steps: list[int] = field(default_factory=list)


def _batch_facts(db: sqlite_utils.Database, wanted: set[int]) -> dict[int, _Facts]:
    """:class:`_Facts` of the requests ``wanted`` (seq numbers), in one pass over the steps."""
    facts: dict[int, _Facts] = {}
    if "batch" in db["steps"].columns_dict:       # schema 4: the batch is a blob
        for step, blob in db.execute("SELECT step, batch FROM steps WHERE batch IS NOT NULL ORDER BY step"):
            batch = Batch(blob)
            seqs = batch.seq.tolist()
            if wanted.isdisjoint(seqs):
                continue
            _add_facts(facts, wanted, step, seqs, batch.num_tokens.tolist(),
                       batch.num_computed_tokens.tolist(), batch.token_id.tolist(),
                       None if batch.token_index is None else batch.token_index.tolist())
        return facts
    for step, b_seq, b_n, b_nc, b_pre, t_idx, t_id in db.execute(
            "SELECT step, batch_seq_json, batch_num_tokens_json, batch_num_computed_json, "
            "batch_prefill_json, token_index_json, token_id_json FROM steps ORDER BY step"):
        seqs = json.loads(b_seq)
        if wanted.isdisjoint(seqs):
            continue
        ncs, ids = json.loads(b_nc), json.loads(t_id)
        prefill = [p for p in json.loads(b_pre) if isinstance(p, list)]
        ns = json.loads(b_n) if b_n is not None else [1] * len(seqs)
        if b_n is None:
            for i, n in prefill:
                ns[i] = n
        idxs = json.loads(t_idx) if t_idx is not None else None
        _add_facts(facts, wanted, step, seqs, ns, ncs, ids, idxs)
    return facts


def _add_facts(facts: dict[int, _Facts], wanted: set[int], step: int, seqs: list[int],
               ns: list[int], ncs: list[int], ids: list[int], idxs: list[int] | None) -> None:
    """Add what one step's batch (aligned lists; ``idxs`` None when the indexes are derived)
    says of the requests ``wanted`` to ``facts``."""
    for i, seq in enumerate(seqs):
        if seq not in wanted:
            continue
        fact = facts.setdefault(seq, _Facts())
        done = ncs[i] + ns[i]
        fact.max_computed = max(fact.max_computed, done)
        if ids[i] < 0:
            continue
        if fact.num_prompt_tokens is None:
            index = 0 if idxs is None else idxs[i]
            fact.num_prompt_tokens = max(1, done - index)
        fact.token_steps.append(step)


def _finish(db: sqlite_utils.Database, seq: int) -> tuple | None:
    """(status, step, num_preemptions, error) of the request's ``FINISHED_*`` transition, or None."""
    return db.execute("SELECT status, step, num_preemptions, error FROM transitions WHERE seq = ? "
                      "AND status LIKE 'FINISHED%' ORDER BY step LIMIT 1", (seq,)).fetchone()


def _spans(values: list[int], most: int = 4) -> str:
    ranges: list[list[int]] = []
    for v in values:
        if ranges and ranges[-1][1] == v - 1:
            ranges[-1][1] = v
        else:
            ranges.append([v, v])
    text = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in ranges[:most])
    return text + (f" and {len(ranges) - most} more" if len(ranges) > most else "")
