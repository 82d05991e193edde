"""End to end: the fake run recorded with recordings.RecordingWriter, replayed in the window
through recordings.Reader, shows the same states as the live fake source."""
from __future__ import annotations

import pytest

from fakes import FakeSource
from recordings import Reader, RecordingWriter
from ui import MainWindow


def record(source: FakeSource, path) -> None:
    """Write ``source``'s run the way the engine would: arrivals, then each step."""
    with RecordingWriter(path, source.run_info()) as writer:
        seen: set[str] = set()
        for rec in source.records(0, source.latest_step() + 1):
            for v in rec.changed:
                if v.request_id not in seen:
                    seen.add(v.request_id)
                    writer.write_request(v.request_id, v.arrival_step, v.arrival_time,
                                         [1] * v.num_prompt_tokens, None, {"max_tokens": v.max_tokens})
            writer.write_step(rec)


@pytest.fixture
def replay(qtbot, tmp_path, source):
    path = tmp_path / "fake.sqlite"
    record(source, path)
    reader = Reader(path)
    w = MainWindow(reader, None, open_recording=Reader)
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()
    reader.close()


def test_replay_of_a_recording_matches_the_live_run(replay, source):
    assert replay.shown_step == source.latest_step()
    for k in (3, 17, 20, 38):
        replay.show_step(k)
        assert replay.state == source.state_at(k)
        assert replay.records == source.records(k - replay.window, k + 1)
        replay.select_request("req-2")
        assert replay.inspector.text.toPlainText() == source.request_text("req-2", k)
    image = replay.grab().toImage()
    colours = {image.pixel(x, y) for x in range(0, image.width(), 4)
               for y in range(0, image.height(), 4)}
    assert len(colours) > 50
    assert not replay.banner.isVisible()
