"""The rejections of compared runs as text lines, for the terminal and the HTML report."""
from __future__ import annotations


def rejection_lines(c) -> list[str]:
    """Why each run's requests were rejected or failed, grouped by reason as ``batchscope run``
    and ``summary`` print them (``app.commands.run.rejection_report`` over the recording's
    ``FINISHED_ERROR`` requests); runs with the same report share it (the same --max-model-len
    rejects the same requests in every run), control and bidi characters of the recorded ids
    and reasons escaped (``recordings.safe_text.visible``). [] when no run rejected any."""
    from app.commands.run import recorded_rejections, rejection_report
    from recordings.file.open_reader import open_reader
    from recordings.safe_text import visible

    reports: dict[str, list[str]] = {}
    for h in c.headlines:
        if h.num_rejected:
            reader = open_reader(h.path)
            try:
                report = rejection_report(recorded_rejections(reader), h.num_requests)
            finally:
                reader.close()
            reports.setdefault(report, []).append(h.name)
    return [line for report, names in reports.items()
            for line in ("", visible(f"{', '.join(names)}: {report}"))]
