"""Recordings made hostile: edited behind BatchScope's back (as an attacker or a broken disk
would), read every way a session reads them, or recorded with hostile text throughout."""
from __future__ import annotations

import sqlite3
from typing import Callable, Mapping



def edit_file(path, *statements: str, functions: Mapping[str, Callable] = {}) -> None:
    """Run ``statements`` on the SQLite file at ``path`` (with ``functions`` registered on the
    connection, as an attacker's own SQLite could have them) and commit."""
    conn = sqlite3.connect(path)
    for name, fn in functions.items():
        conn.create_function(name, -1, fn)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def read_everything(path):
    """Every read a user's session makes of the file: open, seek, records, batches, each request's
    info, text and timeline, SQL on the steps (and on the views of a schema-2/3 file), the summary
    and ``batchscope check``. Returns the check's problems."""
    from recordings.file.open_reader import open_reader
    from recordings.metrics.run_metrics import summarize
    from recordings.check.file_check import check_file

    with open_reader(path) as reader:
        last = reader.latest_step()
        for k in sorted({-1, 0, last // 2, last, last + 5}):
            reader.state_at(k)
        reader.records(0, last + 1)
        reader.step_batches(0, last + 1)
        for rid in reader.request_ids():
            reader.request_info(rid)
            reader.request_text(rid, last)
            reader.request_timeline(rid)
        reader.batches(0, last + 1, ("token_time",))
        reader.execute("SELECT * FROM steps")
        if reader.execute("PRAGMA user_version")[0][0] in (2, 3):
            reader.execute("SELECT * FROM tokens")
            reader.execute("SELECT * FROM step_requests")
        reader.is_complete()
        summarize(reader)
        return check_file(reader)


# --- hostile text ---------------------------------------------------------------------------
HOSTILE = ["<b>bold</b><img src=x onerror=alert(1)>", "\x1b[2J\x1b[31mred\x1b]0;pwn\x07",
           "\u202eexe.txt", "nul\x00byte", "<a href='file:///etc/passwd'>click</a>",
           "line\r\noverwrite\x08\x08"]
MARKUP = ("<b>bold", "<img", "<a href")           # what must never reach a rich-text widget raw
CONTROLS = ("\x1b", "\u202e", "\x00", "\x07", "\x08", "\r")
INVALID_UTF8 = bytes.fromhex("ff3c62fe3e")         # not UTF-8; "<b>" inside


def hostile_runner(num_blocks: int, block_size: int):
    """A fake model runner whose step 3 fails with an error message made of hostile text."""
    from tests.support.fake_runner import FakeRunner

    class HostileRunner(FakeRunner):
        def execute(self, sched):
            if sched.step == 3:
                raise RuntimeError(HOSTILE[0] + HOSTILE[1] + HOSTILE[2])
            return super().execute(sched)

    return HostileRunner(num_blocks, block_size)


def request_ids():
    """The hostile recording's request ids, in arrival order."""
    return [f"r{i}{h}" for i, h in enumerate(HOSTILE)]


def make_hostile_recording(path):
    """A small recorded run whose request ids, prompts, generated text, model/device/dtype/trace
    names and one step's error are ``HOSTILE`` strings; one prompt is invalid UTF-8. Returns it."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.request import SamplingParams
    from tests.support.fake_runner import ToyTokenizer
    from recordings.file.writer import RecordingWriter

    config = EngineConfig(num_gpu_blocks=32, block_size=4, max_num_seqs=4, max_num_batched_tokens=32,
                          max_model_len=48, clock="virtual", check_invariants=True)
    run_info = {"config": config.to_dict(), "model": HOSTILE[0], "device": HOSTILE[1], "dtype": HOSTILE[2],
                "trace": {"name": HOSTILE[2] + HOSTILE[4] + ".csv", "hash": HOSTILE[3]}}
    tokenizer = ToyTokenizer({i: HOSTILE[i % len(HOSTILE)] for i in range(1000)})
    writer = RecordingWriter(path, run_info)
    engine = LLMEngine(config, hostile_runner(32, 4), 32, tokenizer=tokenizer, recorder=writer)
    for i, rid in enumerate(request_ids()):
        engine.add_request([1 + i, 2, 3, 4, 5], SamplingParams(max_tokens=6), request_id=rid,
                           prompt_text=HOSTILE[i], arrival_time=float(i))
    while engine.has_unfinished:
        engine.step()
    writer.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE requests SET prompt_text = CAST(? AS TEXT) WHERE seq = 0", (INVALID_UTF8,))
    conn.commit()
    conn.close()
    return path
