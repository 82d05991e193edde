"""Wall-clock facts of a recorded run that its engine clock leaves out: time spent paused, and the
latencies in seconds of a run on the virtual clock (whose latencies are counted in steps).

Every step row keeps ``start_ns`` / ``end_ns``, wall nanoseconds since the engine started, pauses
included, whatever the clock. Under the wall clock the engine clock stops while the user pauses
the engine (``LLMEngine.freeze_clock``), so each step's ``clock`` (engine seconds at its start)
falls behind its ``start_ns`` by the time paused so far: the time paused during the run is that
lag at the last step minus the lag at the first. The virtual clock counts steps, so a pause of
a virtual-clock run cannot be told apart from idle time: its wall figures include it.
"""
from __future__ import annotations

from dataclasses import dataclass

from recordings.metrics.stats import Percentiles, latencies
from engine.vocab import Clock


@dataclass(frozen=True)
class WallClock:
    """``span_s``: wall seconds from the first step's start to the last step's end, pauses
    included; ``paused_s``: seconds of it the engine was paused (wall clock only, else 0);
    ``ttft`` / ``itl``: TTFT and ITL in wall seconds for a run on the virtual clock (a token's time
    is its step's ``end_ns``, an arrival's the start of its ``arrival_step``), None on other clocks
    (their latencies are in seconds already)."""

    clock: str
    span_s: float
    paused_s: float
    ttft: Percentiles | None = None
    itl: Percentiles | None = None

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in ``RunSummary.format_table``'s two-column style."""
        lines = []
        if self.paused_s > 0:
            lines.append(f"{'paused (s)':<{width}}  {self.paused_s:.3f} of {self.span_s:.3f} s wall time "
                         f"(not counted in the wall duration and tokens/s)")
        if self.ttft is not None and self.itl is not None:
            lines.append(f"{'latency unit':<{width}}  steps (virtual clock: a running request gets a token "
                         f"every step, so an ITL is 1 unless it waited); in wall seconds:")
            num = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            for name, p in (("TTFT", self.ttft), ("ITL", self.itl)):
                lines.append(f"{f'{name} wall p50/90/99 (s)':<{width}}  {num(p.p50)} / {num(p.p90)} / "
                             f"{num(p.p99)}  (n={p.num_samples})")
        return lines


MIN_PAUSE_S = 1e-3       # shorter "pauses" are clock-reading noise


def paused_seconds(reader, clock: str) -> float:
    """Seconds the engine was paused between the first and the last recorded step (see the
    module doc); 0.0 unless ``clock`` is ``wall`` or without steps."""
    if clock != Clock.WALL:
        return 0.0
    rows = reader.execute("SELECT start_ns / 1e9 - clock FROM steps WHERE step IN "
                          "((SELECT min(step) FROM steps), (SELECT max(step) FROM steps)) ORDER BY step")
    if not rows:
        return 0.0
    paused = rows[-1][0] - rows[0][0]
    # The two clocks are read a few ns apart and start_ns / 1e9 rounds to ~0.1 us: a difference
    # under MIN_PAUSE_S is that noise, not a pause (a user's pause lasts far longer).
    return paused if paused >= MIN_PAUSE_S else 0.0


def wall_clock(reader) -> WallClock:
    """:class:`WallClock` of the recording ``reader``. Raises :class:`recordings.errors.RecordingError`
    if the file cannot be read."""
    clock = str(reader.run_info().config.get("clock", "virtual"))
    (first_ns, last_ns), = reader.execute("SELECT min(start_ns), max(end_ns) FROM steps")
    span = 0.0 if first_ns is None else (last_ns - first_ns) / 1e9
    ttft = itl = None
    if clock == Clock.VIRTUAL and reader.execute("PRAGMA user_version")[0][0] >= 2:
        arrival = dict(reader.execute("SELECT r.seq, s.start_ns / 1e9 FROM requests r "
                                      "JOIN steps s ON s.step = r.arrival_step"))
        t, i = latencies(reader, token_time="end_ns / 1e9", arrival=arrival)
        ttft, itl = Percentiles.of(t, consume=True), Percentiles.of(i, consume=True)
    return WallClock(clock, span, paused_seconds(reader, clock), ttft, itl)
