"""Admission control as a recording shows it: how many requests were turned away, by which rule,
and the predictions or waits behind it (``engine.sched.admission``: the ``admission_rejected``
events, whose detail is a ``Rejection``'s JSON). No Qt."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine.sched.admission import rejection_info
from engine.vocab import AdmissionRejection, EventKind
from recordings.file.reader import Reader
from recordings.metrics.stats import Percentiles
from recordings.numbers import number_text

REASON_TEXT = {AdmissionRejection.SLO_TTFT: "predicted TTFT over the SLO, at arrival",
               AdmissionRejection.QUEUE_TIMEOUT: "timed out waiting"}


@dataclass(frozen=True)
class AdmissionSummary:
    """The run's admission settings (``admission``, ``max_queue_time`` on the engine clock,
    ``slo_ttft_ms``) and its rejections: ``num_rejected`` by reason (``slo_ttft``,
    ``queue_timeout``), the predicted TTFTs of the SLO rejections and the waits of the timed-out
    requests (engine clock units: ``time_unit``)."""

    admission: str
    max_queue_time: float | None
    slo_ttft_ms: float | None
    time_unit: str
    num_rejected: dict[str, int] = field(default_factory=dict)
    predicted_ttft: Percentiles = Percentiles(None, None, None, 0)
    waited: Percentiles = Percentiles(None, None, None, 0)

    @property
    def is_on(self) -> bool:
        """Whether any admission rule was set for the run."""
        return self.admission != "all" or self.max_queue_time is not None

    @property
    def total_rejected(self) -> int:
        return sum(self.num_rejected.values())

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in ``RunSummary.format_table``'s two-column style ([] when no rule was set)."""
        if not self.is_on:
            return []
        rules = []
        if self.admission == "slo":
            rules.append(f"SLO: predicted TTFT <= {self.slo_ttft_ms:g} ms at arrival")
        if self.max_queue_time is not None:
            rules.append(f"max_queue_time {self.max_queue_time:g} {self.time_unit}")
        lines = [f"{'admission control':<{width}}  {'; '.join(rules)}"]
        counts = ", ".join(f"{n} {REASON_TEXT.get(k, k)}" for k, n in sorted(self.num_rejected.items()))
        lines.append(f"{'rejected by admission':<{width}}  {self.total_rejected}" + (f" ({counts})" if counts else ""))
        for name, p in (("rejected: predicted TTFT", self.predicted_ttft), ("timed out: waited", self.waited)):
            if p.num_samples:
                lines.append(f"{f'{name} p50/p99':<{width}}  {number_text(p.p50)} / {number_text(p.p99)} {self.time_unit}")
        return lines


def summarize_admission(reader: Reader) -> AdmissionSummary:
    """The :class:`AdmissionSummary` of ``reader``'s run (no rejections for a run recorded before
    admission control: its config lacks the knobs)."""
    config = reader.run_info().config
    clock = str(config.get("clock", "virtual"))
    counts: Counter = Counter()
    predicted, waited = [], []
    if reader.execute("PRAGMA user_version")[0][0] >= 2:
        for (detail,) in reader.execute("SELECT detail FROM events WHERE kind = ?", (EventKind.ADMISSION_REJECTED.value,)):
            info = rejection_info(detail or "")
            if info is None:
                continue
            counts[info.reason] += 1
            (predicted if info.reason == AdmissionRejection.SLO_TTFT else waited).append(info.value)
    return AdmissionSummary(admission=str(config.get("admission", "all")),
                            max_queue_time=config.get("max_queue_time"), slo_ttft_ms=config.get("slo_ttft_ms"),
                            time_unit="steps" if clock == "virtual" else "s", num_rejected=dict(counts),
                            predicted_ttft=Percentiles.of(predicted), waited=Percentiles.of(waited))
