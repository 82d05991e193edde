"""Exports do not depend on the schema: the schema-3 and schema-4 fixtures (written by
BatchScope before schema 4 and 5) and the same steps written again by today's writer (schema 5)
export to the same Perfetto trace, CSV tables and JSON summary, byte for byte."""
from __future__ import annotations

import shutil

from recordings.export.perfetto import export_perfetto
from recordings.export.summary_json import export_json
from recordings.export.tables import export_csv
from recordings.file.open_reader import open_reader
from recordings.file.schema import latest_version
from recordings.file.writer import RecordingWriter
from tests.support.paths import FIXTURES


def rewrite(src, dst) -> None:
    """Write the steps and requests of the recording at ``src`` into a new recording at ``dst``."""
    with open_reader(src) as reader:
        info = reader.run_info()
        interval = reader.execute("SELECT keyframe_interval FROM runs")[0][0]
        records = reader.records(0, reader.latest_step() + 1)
        with RecordingWriter(dst, info, keyframe_interval=interval) as writer:
            for record in records:
                for a in record.arrivals:
                    req = reader.request_info(a.request_id)
                    writer.write_request(a.request_id, a.arrival_step, a.arrival_time,
                                         req.prompt_token_ids, req.prompt_text, req.sampling)
                writer.write_step(record)
    with open_reader(dst) as reader:
        assert reader.execute("PRAGMA user_version") == [(latest_version(),)]
        assert reader.records(0, 10**6) == records


def exports(path, out) -> dict[str, bytes]:
    out.mkdir()
    with open_reader(path) as reader:
        export_perfetto(reader, out / "trace.json")
        export_json(reader, out / "summary.json")
        export_csv(reader, out / "tables")
    return {p.name: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_older_schemas_and_todays_export_the_same(tmp_path):
    for name in ("v3_prefix", "v3_swap", "v4_prefix", "v4_swap"):
        old, new, path = (tmp_path / name / f for f in ("old.sqlite", "new.sqlite", "run.sqlite"))
        old.parent.mkdir()
        shutil.copy(FIXTURES / f"{name}.sqlite", old)
        rewrite(old, new)
        shutil.copy(old, path)        # each exported from the same path: the exports name it
        before = exports(path, tmp_path / name / "old_out")
        shutil.copy(new, path)
        after = exports(path, tmp_path / name / "new_out")
        assert sorted(before) == ["summary.json", "tables-requests.csv", "tables-steps.csv", "trace.json"]
        for file in before:
            assert after[file] == before[file], f"{name}: {file} differs"
