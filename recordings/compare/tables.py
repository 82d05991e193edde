"""A :class:`recordings.compare.comparison.Comparison` as tables of strings (``(headers, rows)``): one
definition of what the CLI prints, the HTML report shows and the compare window's header reads."""
from __future__ import annotations

from collections import Counter

from recordings.compare.comparison import HEADLINE_FIELDS, Comparison
from recordings.compare.requests import PARTS, RequestDelta
from recordings.numbers import number_text, signed_text

Table = tuple[list[str], list[list[str]]]


def num(value: float | None, spec: str | None = None) -> str:
    """``value`` formatted by ``spec``, or as ``recordings.numbers.number_text`` (``6,353``,
    ``0.0709``: never an exponent) without one; '-' for None."""
    if value is None:
        return "-"
    return number_text(value) if spec is None else format(value, spec)


def ratio_text(r: float | None) -> str:
    """'1.36x', '281x', '0.00667x' (``number_text``); '-' when there is no ratio."""
    return "-" if r is None else f"{number_text(r)}x"


def is_better(attr: str, r: float | None, tolerance: float = 0.02) -> bool | None:
    """Whether a ratio ``r`` of headline ``attr`` is an improvement over the first run (None:
    no ratio, or within ``tolerance`` of 1)."""
    if r is None or abs(r - 1.0) <= tolerance:
        return None
    higher = next(h for a, _l, h, _f in HEADLINE_FIELDS if a == attr)
    return (r > 1.0) == higher


def metric_label(attr: str, label: str, unit: str) -> str:
    """'TTFT p50 (s)' for latencies; throughputs and occupancy as they are."""
    return f"{label} ({unit})" if attr.startswith(("ttft", "tpot")) else label


def headline_table(c: Comparison) -> Table:
    """Rows: one per :data:`HEADLINE_FIELDS` metric that some run has; columns: the runs, each
    later run's value followed by its ratio to the first run's."""
    headers = ["metric"] + [h.name for h in c.headlines]
    rows = []
    for attr, label, _higher, spec in HEADLINE_FIELDS:
        if all(h.value(attr) is None for h in c.headlines):
            continue                    # no run has it (goodput without an SLO, no prefix caching)
        row = [metric_label(attr, label, c.time_unit), num(c.headlines[0].value(attr), spec)]
        for k in range(1, len(c.headlines)):
            row.append(f"{num(c.headlines[k].value(attr), spec)}  ({ratio_text(c.ratios(k)[attr])})")
        rows.append(row)
    rows.append(["requests served"] + [f"{h.num_served} of {h.num_requests}" for h in c.headlines])
    rows.append(["rejected / failed"] + [f"{h.num_rejected} of {h.num_requests}" for h in c.headlines])
    if any(h.num_admission_rejected for h in c.headlines):
        rows.append(["rejected by admission"] + [str(h.num_admission_rejected) for h in c.headlines])
    return headers, rows


def delta_table(deltas: list[RequestDelta], unit: str, top: int | None = 10, slower: bool | None = True) -> Table:
    """The ``top`` requests (None: all) that got slower (``slower``) or faster the most, or
    every request most slowed down first (``slower=None``): E2E in both runs, the change, its
    parts and its cause with the evidence."""
    if slower is None:
        picked = list(deltas)
    else:
        picked = [d for d in deltas if (d.delta > 0 if slower else d.delta < 0)]
        picked = picked if slower else picked[::-1]
    picked = picked[:top] if top is not None else picked
    headers = ["request", "prompt", "output", f"E2E A ({unit})", f"E2E B ({unit})", "change",
               *[f"Δ {p}" for p in PARTS], "why"]
    rows = [[d.request_id, str(d.num_prompt_tokens), str(d.num_output_tokens), num(d.e2e_a), num(d.e2e_b),
             f"{signed_text(d.delta)} ({d.delta / d.e2e_a:+.0%})" if d.e2e_a else signed_text(d.delta),
             *[signed_text(d.parts[p]) for p in PARTS], f"{d.cause}: {d.evidence}" if d.evidence else d.cause]
            for d in picked]
    return headers, rows


def cause_summary(deltas: list[RequestDelta]) -> str:
    """'31 slower (queueing 20, decode 11), 40 faster (queueing 40), 3 unchanged'."""
    def part(name: str, ds: list[RequestDelta]) -> str:
        counts = Counter(d.cause for d in ds)
        inner = ", ".join(f"{cause} {n}" for cause, n in counts.most_common())
        return f"{len(ds)} {name}" + (f" ({inner})" if inner else "")

    unchanged = [d for d in deltas if d.cause == "unchanged"]
    moved = [d for d in deltas if d.cause != "unchanged"]
    return ", ".join([part("slower", [d for d in moved if d.delta > 0]),
                      part("faster", [d for d in moved if d.delta < 0]), f"{len(unchanged)} unchanged"])


def fairness_table(c: Comparison) -> Table:
    """Rows: Jain's index of normalised latency, then per prompt-length bucket the p50 / p99 E2E
    latency of each run (columns)."""
    unit = c.time_unit
    headers = ["", *[h.name for h in c.headlines]]
    rows = [["Jain's index, E2E / output token (1 = fair)", *[num(f.jain, ".3f") for f in c.fairness]]]
    for i, bucket in enumerate(c.fairness[0].buckets):
        rows.append([f"prompt {bucket.label} tokens ({bucket.num_requests} req): E2E p50 / p99 ({unit})",
                     *[f"{num(f.buckets[i].e2e_p50)} / {num(f.buckets[i].e2e_p99)}" for f in c.fairness]])
    return headers, rows
