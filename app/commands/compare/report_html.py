"""``batchscope compare --report OUT.html``: a self-contained HTML report of a comparison.

The page is rendered by jinja2 from ``app/commands/compare/templates/compare_report.html.j2`` with autoescaping
on, so every string taken from a recording (names, paths, request ids, knob values) is
HTML-escaped. Plots are PNG images embedded as base64 ``data:`` URLs, drawn with pyqtgraph and
its ``ImageExporter`` (offscreen when there is no display): the runs' metrics over time (the
compare window's plots), each request's E2E latency in run B against run A, and the E2E latency
CDF of every run. Tables come from :mod:`recordings.compare.tables`, as the CLI prints them.
"""
from __future__ import annotations

import base64
import datetime as dt
import os
from pathlib import Path

import numpy as np

from recordings.compare.comparison import HEADLINE_FIELDS, Comparison
from recordings.compare.tables import (cause_summary, delta_table, fairness_table, headline_table,
                                       is_better)

WIDTH, HEIGHT = 1150, 300


def _app():
    """The QApplication (offscreen when there is none and no display)."""
    from PySide6.QtWidgets import QApplication

    from app.commands.window import _has_display

    if QApplication.instance() is None and not _has_display():
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from ui.qt_app import qt_application

    return qt_application()


def png_base64(item, width: int = WIDTH) -> str:
    """A pyqtgraph scene or item (a ``PlotItem``, a ``GraphicsScene``) as a base64 PNG."""
    from PySide6.QtCore import QBuffer, QIODevice
    from pyqtgraph.exporters import ImageExporter

    exporter = ImageExporter(item)
    exporter.parameters()["width"] = width
    image = exporter.export(toBytes=True)
    buf = QBuffer()
    buf.open(QIODevice.WriteOnly)
    image.save(buf, "PNG")
    return base64.b64encode(bytes(buf.data())).decode("ascii")


# The page is light (white, dark text): its plots too, not the window's dark theme.
PAGE_BG, PAGE_FG, PAGE_AXIS = "#ffffff", "#222222", "#777777"
LEFT_AXIS_WIDTH, BOTTOM_AXIS_HEIGHT = 64, 46     # room for the tick labels and the axis title apart


def light_plot(p, title_color: str = PAGE_FG) -> None:
    """Restyle the pyqtgraph ``PlotItem`` ``p`` for the light page: dark axes, tick labels and
    title, and axes wide enough that an axis title never overlaps its tick labels."""
    import pyqtgraph as pg

    for name in ("left", "bottom"):
        axis = p.getAxis(name)
        axis.setPen(pg.mkPen(PAGE_AXIS))
        axis.setTextPen(pg.mkPen(PAGE_FG))
        axis.setStyle(tickTextOffset=4)
        if axis.label.isVisible():
            axis.setLabel(axis.labelText, units=axis.labelUnits, **{"color": PAGE_FG, "font-size": "9pt"})
    p.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
    p.getAxis("bottom").setHeight(BOTTOM_AXIS_HEIGHT)
    if p.titleLabel.isVisible():
        p.setTitle(p.titleLabel.text, color=title_color, size="9pt")


def _legend(p):
    """A legend for the light page, top left inside ``p``."""
    return p.addLegend(offset=(10, 10), labelTextColor=PAGE_FG, brush=(255, 255, 255, 220), pen=PAGE_AXIS)


def _plot(x_label: str, y_label: str):
    import pyqtgraph as pg

    from ui.style.theme import style_axis

    w = pg.PlotWidget(background=PAGE_BG)
    p = w.getPlotItem()
    style_axis(p.getAxis("bottom"), x_label)
    style_axis(p.getAxis("left"), y_label)
    light_plot(p)
    _legend(p)
    p.resize(WIDTH, HEIGHT + 80)          # laid out at the exported size (the widget is never shown)
    return w, p


def metrics_png(paths: list[Path], names: list[str]) -> str:
    """The compare window's metrics plots (by time) of the recordings at ``paths`` (runs
    ``names``, in the legend), in the page's light theme, as a base64 PNG."""
    w = metrics_plots(paths, names)         # (held: its layout lives as long as the widget)
    return png_base64(w.layout_widget.ci)


def metrics_plots(paths: list[Path], names: list[str]):
    """The ``ui.compare.metrics.CompareMetrics`` of :func:`metrics_png`, laid out at the
    exported size, its first plot holding the legend of ``names``."""
    from recordings.file.open_reader import open_reader
    from ui.compare.metrics import CompareMetrics, run_columns, run_series
    from ui.compare.window import RUN_COLORS, UNITS

    readers = [open_reader(p) for p in paths]
    runs = [run_columns(r) for r in readers]
    unit = UNITS.get(readers[0].run_info().config.get("clock"), "s")
    top = max((float(run["token_time"][-1]) for run in runs if len(run["step"])), default=1.0)
    w = CompareMetrics()
    w.set_runs([run_series(run, "time", top) for run in runs], RUN_COLORS[:len(runs)],
               f"engine time ({unit})", unit)
    for r in readers:
        r.close()
    for line in w.cursors.values():
        line.hide()
    w.layout_widget.setBackground(PAGE_BG)
    for p in w.plots.values():
        light_plot(p)
    first = next(iter(w.plots))
    legend = _legend(w.plots[first])               # which colour is which run
    for k, name in enumerate(names):
        legend.addItem(w.curves[(first, k)], name)
    w.layout_widget.ci.resize(WIDTH, HEIGHT)   # laid out at the exported size (never shown)
    return w


def scatter_png(c: Comparison, k: int) -> str:
    """Each request's E2E latency in run ``k`` (y) against the first run (x), and y = x."""
    import pyqtgraph as pg

    from ui.compare.window import BAD, GOOD

    unit = c.time_unit
    w, p = _plot(f"E2E latency of {c.headlines[0].name} ({unit})", f"E2E latency of {c.headlines[k].name} ({unit})")
    d = c.deltas[k - 1]
    a, b = np.array([x.e2e_a for x in d]), np.array([x.e2e_b for x in d])
    top = float(max(a.max(initial=0), b.max(initial=0), 1e-9))
    p.plot([0, top], [0, top], pen=pg.mkPen(PAGE_AXIS, style=pg.QtCore.Qt.DashLine), name="same latency")
    for mask, color, name in ((b > a, BAD, "slower"), (b <= a, GOOD, "faster or same")):
        p.plot(a[mask], b[mask], pen=None, symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None,
               name=f"{name} ({int(mask.sum())})")
    return png_base64(p)


def cdf_png(c: Comparison) -> str:
    """The CDF of every run's E2E latency over its served requests."""
    import pyqtgraph as pg

    from ui.compare.window import RUN_COLORS

    w, p = _plot(f"E2E latency ({c.time_unit})", "fraction of requests served")
    for k, (h, t) in enumerate(zip(c.headlines, c.times)):
        e2e = np.sort(t.e2e[np.isfinite(t.e2e)])
        p.plot(e2e, np.arange(1, len(e2e) + 1) / max(len(e2e), 1),
               pen=pg.mkPen(RUN_COLORS[k % len(RUN_COLORS)], width=2), name=h.name)
    return png_base64(p)


def _headline_cells(c: Comparison) -> dict:
    """The headline table with a CSS class per cell (better / worse than the first run)."""
    headers, rows = headline_table(c)
    attrs = [a for a, *_ in HEADLINE_FIELDS]
    out = []
    for i, row in enumerate(rows):
        cells = [(row[0], "")]
        for k, cell in enumerate(row[1:]):
            good = is_better(attrs[i], c.ratios(k)[attrs[i]]) if k and i < len(attrs) else None
            cells.append((cell, "better" if good else "worse" if good is False else ""))
        out.append(cells)
    return {"headers": headers, "rows": out}


def _runs(c: Comparison) -> list[dict]:
    from recordings.file.open_reader import open_reader

    runs = []
    for h in c.headlines:
        with open_reader(h.path) as r:
            info = r.run_info()
        cfg = info.config
        name = info.model_name
        knobs = ", ".join(f"{k}={cfg.get(k)}" for k in (
            "policy", "max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks", "block_size",
            "enable_chunked_prefill", "enable_prefix_caching", "preemption_mode") if k in cfg)
        runs.append({"name": h.name, "path": h.path, "model": f"{name} on {info.device}", "knobs": knobs})
    return runs


def render_report(c: Comparison, plots: dict[str, str], scatters: list[str]) -> str:
    """The report's HTML text for ``c`` with the given base64 PNGs (autoescaped jinja2)."""
    import jinja2

    from app.commands.compare.rejections import rejection_lines

    env = jinja2.Environment(loader=jinja2.PackageLoader("app.commands.compare", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    pairs = []
    for k in range(1, len(c.headlines)):
        d = c.deltas[k - 1]
        h_slow, r_slow = delta_table(d, c.time_unit, top=20, slower=True)
        h_fast, r_fast = delta_table(d, c.time_unit, top=20, slower=False)
        pairs.append({"a": c.headlines[0].name, "b": c.headlines[k].name, "summary": cause_summary(d),
                      "scatter": scatters[k - 1],
                      "tables": [("Most slowed down", {"headers": h_slow, "rows": r_slow}),
                                 ("Most sped up", {"headers": h_fast, "rows": r_fast})]})
    fh, fr = fairness_table(c)
    first = c.headlines[0]
    return env.get_template("compare_report.html.j2").render(
        names=[h.name for h in c.headlines], digest=c.digest, num_requests=first.num_requests,
        clock=first.clock, simulated=first.simulated, written=dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        runs=_runs(c), headline=_headline_cells(c), plots=plots, pairs=pairs,
        fairness={"headers": fh, "rows": fr}, rejections="\n".join(rejection_lines(c)).strip())


def write_report(c: Comparison, out: Path) -> None:
    """Write the HTML report of ``c`` to ``out`` (overwritten). Raises ``OSError`` if it cannot
    be written."""
    _app()
    paths = [Path(h.path) for h in c.headlines]
    plots = {"metrics": metrics_png(paths, [h.name for h in c.headlines]), "cdf": cdf_png(c)}
    scatters = [scatter_png(c, k) for k in range(1, len(c.headlines))]
    Path(out).write_text(render_report(c, plots, scatters), encoding="utf-8")
