"""Request colours: neighbours far apart in a perceptual space, no repeats among live ids."""
from __future__ import annotations

import itertools

from coloraide import Color

from ui.style.colors import FREE, IDLE, NUM_COLORS, PALETTE, color_index, css, request_rgb

JND = 0.02          # a just-noticeable difference in OKLab (Ottosson's space), roughly


def delta(a, b) -> float:
    """OKLab distance of two 8-bit sRGB colours."""
    return Color(css(a)).delta_e(Color(css(b)), method="ok")


def test_consecutive_ids_get_well_separated_colours():
    ids = [f"req-{i}" for i in range(300)]
    for a, b in zip(ids, ids[1:]):
        assert delta(request_rgb(a), request_rgb(b)) > 10 * JND, (a, b)
    # two apart still clearly different (rows of a table, neighbouring cells of the map)
    for a, b in zip(ids, ids[2:]):
        assert delta(request_rgb(a), request_rgb(b)) > 5 * JND, (a, b)


def test_no_repeats_among_256_live_ids_anywhere_in_a_long_run():
    for start in (0, 700, 1000, 5_000, 123_456):
        colours = [request_rgb(f"req-{i}") for i in range(start, start + 256)]
        assert len(set(colours)) == 256, start
        # any 32 requests in a row (a batch) differ by more than a JND, across the wrap too
        closest = min(delta(a, b) for a, b in itertools.combinations(colours[:32], 2))
        assert closest > JND, (start, closest)


def test_palette_has_no_greys_and_repeats_only_after_num_colors():
    assert len(PALETTE) == NUM_COLORS and len(set(PALETTE)) == NUM_COLORS
    assert FREE not in PALETTE and IDLE not in PALETTE
    for c in PALETTE[:200]:
        assert Color(css(c)).convert("oklch")["chroma"] > 0.05, c
    assert request_rgb("req-3") == request_rgb(f"req-{3 + NUM_COLORS}")


def test_sequences_of_one_prompt_differ_from_each_other_and_from_the_next_prompt():
    seqs = [request_rgb(f"req-7#{k}") for k in range(4)]
    assert len(set(seqs)) == 4
    assert min(delta(a, b) for a, b in itertools.combinations(seqs, 2)) > 5 * JND
    assert color_index("req-7#0") == color_index("req-7")
    assert delta(request_rgb("req-7#0"), request_rgb("req-8#0")) > 10 * JND


def test_other_ids_are_hashed_stably():
    assert color_index("a-uuid-like-id") == color_index("a-uuid-like-id")
    assert 0 <= color_index("a-uuid-like-id") < NUM_COLORS
