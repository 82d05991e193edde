"""Numbers the window shows: seconds in the unit that reads best, never an exponent."""
from __future__ import annotations

import numpy as np
import pytest

from recordings.numbers import clock_text, number_text, seconds_text, signed_text
from ui.views.metrics_plots import output_tps


@pytest.mark.parametrize("x, text", [(2290.4, "2,290 s"), (38.2, "38.2 s"), (0.412, "412 ms"),
                                     (0.0412, "41.2 ms"), (7.5e-6, "7.5 µs"), (0.0, "0 s"),
                                     (12_345_678.9, "12,345,679 s"), (9.9996, "10 s"),
                                     (1.0, "1 s"), (None, "–"), (float("nan"), "–")])
def test_seconds_read_as_people_write_them(x, text):
    assert seconds_text(x) == text


def test_no_magnitude_prints_an_exponent():
    for x in np.geomspace(1e-9, 1e12, 400):
        for text in (seconds_text(x), number_text(x), seconds_text(-x), clock_text(x, "steps")):
            assert "e" not in text.replace("steps", ""), text


def test_simulated_seconds_and_steps_keep_their_unit():
    assert seconds_text(0.412, "sim s") == "412 sim ms"
    assert clock_text(38.2, "sim s") == "38.2 sim s"
    assert clock_text(2290.4, "steps") == "2,290 steps"
    assert clock_text(0.5, "") == "0.5"


def test_output_tps_is_tokens_over_time_of_the_trailing_window():
    new = np.array([100.0, 1.0, 1.0, 1.0])
    sec = np.array([1.0, 0.001, 0.001, 0.001])
    got = output_tps(new, sec, window=2)
    # tokens of the window over its time, not the mean of per-step rates (1,000 tok/s steps)
    assert np.allclose(got, [100.0, 101 / 1.001, 2 / 0.002, 2 / 0.002])
    assert np.allclose(output_tps(new, sec, window=10)[-1], new.sum() / sec.sum())
    with pytest.raises(ValueError, match="window"):
        output_tps(new, sec, window=0)


def test_signed_numbers():
    assert [signed_text(x) for x in (6390.4, -0.0347, 0.0, 1e-9, None)] == ["+6,390", "-0.0347", "0", "0", "–"]


def test_compare_tables_never_print_an_exponent():
    """An overloaded run against an admission-controlled one: E2E in the thousands of seconds
    against tens, parts of 1e-5 s, ratios of 281x and 0.00463x (they printed as 6.39e+03 and
    6.93e-05 before)."""
    from recordings.compare.requests import PARTS, RequestDelta
    from recordings.compare.tables import delta_table, num, ratio_text

    parts = dict(zip(PARTS, (-6390.0, 0.0, 6.93e-05, -2.47)))
    d = RequestDelta("r12020", 5027, 400, 6433.0, 39.12, parts, "queueing",
                     "first scheduled 6,420 → 28.8 s after arrival")
    headers, rows = delta_table([d], "s", slower=False)
    cells = " ".join(rows[0])
    assert "e+" not in cells and "e-" not in cells
    assert rows[0][3:10] == ["6,433", "39.1", "-6,394 (-99%)", "-6,390", "0", "0", "-2.47"]
    assert [ratio_text(281.3), ratio_text(0.00463), num(12345.6), num(0.070921)] == \
        ["281x", "0.00463x", "12,346", "0.0709"]
