"""The engine clock of a recording on an exported time axis.

A recording's times (``steps.clock``, ``steps.token_time``, ``requests.arrival_time``) are on the
run's engine clock: steps under the ``virtual`` clock, seconds under ``wall`` and simulated
seconds under ``sim`` (see docs/recording.md). Exports need one physical unit: seconds map
1:1, and a virtual step maps to a fixed, documented duration (``us_per_step``).
"""
from __future__ import annotations

from dataclasses import dataclass
from engine.run_info import RunInfo
from engine.vocab import Clock, values

US_PER_STEP = 1000.0    # virtual clock: one step is drawn as 1 ms unless told otherwise
CLOCKS = values(Clock)


@dataclass(frozen=True)
class TimeBase:
    """Engine-clock value -> microseconds: ``us(t) = t * us_per_unit``.

    ``clock`` is the run's clock (one of :data:`CLOCKS`); ``us_per_unit`` is 1e6 for the wall
    and sim clocks (their unit is the second) and the chosen microseconds per step for the
    virtual clock."""

    clock: str
    us_per_unit: float

    def us(self, t: float) -> float:
        """``t`` (engine clock) in microseconds, rounded to 1 ns (3 decimals)."""
        return round(float(t) * self.us_per_unit, 3)

    def ms(self, t: float) -> float:
        """``t`` (engine clock) in milliseconds, rounded to 1 us."""
        return round(float(t) * self.us_per_unit / 1000.0, 3)

    @property
    def description(self) -> str:
        """What one exported unit means, for metadata and messages
        ('virtual clock: 1 step = 1000 us', 'sim clock: simulated seconds')."""
        if self.clock == Clock.VIRTUAL:
            return f"virtual clock: 1 step = {self.us_per_unit:g} us"
        if self.clock == Clock.SIM:
            return "sim clock: simulated seconds (the cost model's step times), not the time the simulation took"
        return "wall clock: seconds since the run started (paused time not counted)"


def time_base(run_info: RunInfo, us_per_step: float = US_PER_STEP) -> TimeBase:
    """The time base of a recording from its ``run_info`` (``run_info.config['clock']``; a recording
    without one is virtual, as ``recordings.metrics.run_metrics`` reads it). Raises ``ValueError`` for
    ``us_per_step`` <= 0 or an unknown clock."""
    if not us_per_step > 0:
        raise ValueError(f"microseconds per virtual step must be > 0, got {us_per_step}")
    clock = str(run_info.config.get("clock", "virtual"))
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r} in the recording (known: {', '.join(CLOCKS)})")
    return TimeBase(clock, us_per_step if clock == Clock.VIRTUAL else 1e6)
