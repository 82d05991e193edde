"""The metrics panel fits a narrow column (titles claim no width), and each value axis labels
three ticks (0, half, top) so they do not overlap on short plots."""
from __future__ import annotations

from engine.run_info import RunInfo
from ui.views.metrics_plots import MetricsPlots


def shown_panel(qtbot, source, width: int, height: int) -> MetricsPlots:
    """The panel with a simulated run's (the longest) titles and 30 steps, shown at that size."""
    w = MetricsPlots()
    qtbot.addWidget(w)
    w.set_run_info(RunInfo(simulated=True))            # the longest titles
    w.set_records(source.records(0, 31), 30, 39)
    w.resize(width, height)
    w.show()
    qtbot.waitExposed(w)
    return w


def test_both_columns_fit_a_narrow_panel(qtbot, source):
    w = shown_panel(qtbot, source, 400, 300)
    layout = w.layout_widget.ci
    assert layout.minimumWidth() <= w.layout_widget.width()
    right = max(p.mapRectToScene(p.boundingRect()).right() for p in w.plots.values())
    assert right <= w.layout_widget.width() + 1
    widths = {key: p.geometry().width() for key, p in w.plots.items()}
    assert max(widths.values()) - min(widths.values()) < 0.15 * max(widths.values())   # equal columns


def test_value_axes_label_zero_half_and_top(qtbot, source):
    w = MetricsPlots()
    qtbot.addWidget(w)
    w.set_records(source.records(0, 31), 30, 39)
    for key, plot in w.plots.items():
        major, minor = plot.getAxis("left")._tickLevels       # what setTicks stored (pyqtgraph's field)
        assert [v for v, _ in major][0] == 0 and len(major) == 3 and not minor, key
        top = major[-1][0]
        assert abs(major[1][0] - top / 2) < 1e-9
        assert plot.getViewBox().viewRange()[1][1] >= top


def test_every_title_is_whole_in_the_windows_metrics_panel(qtbot, source):
    """At the width the main window gives the panel (~500 px at 1600), no title is cut: each
    title's text (its widest line) fits the width its label gets."""
    w = shown_panel(qtbot, source, 500, 420)
    for key, p in w.plots.items():
        text = p.titleLabel.item
        assert text.document().idealWidth() <= p.titleLabel.geometry().width() + 1, key


def title_width(plot) -> float:
    """The width the title's lines take as set_title draws them (9 pt, 8 pt notes)."""
    from PySide6.QtGui import QFont, QTextDocument
    font = QFont()
    font.setPointSize(9)
    doc = QTextDocument()
    doc.setDefaultFont(font)
    doc.setDocumentMargin(0)
    doc.setHtml(plot.titleLabel.text)
    return doc.idealWidth()


def test_every_title_reads_whole_at_the_panels_narrowest(qtbot, source):
    """Narrower than its titles the panel cut them ("KV cache usag", "Step time · simulate",
    the queue legend's "▬ru"): its minimum width now holds two columns of whole titles."""
    w = shown_panel(qtbot, source, 200, 420)        # asks for less than the minimum
    assert w.width() == w.minimumWidth() > 200
    for key, plot in w.plots.items():
        assert title_width(plot) <= plot.titleLabel.geometry().width() + 1, key


def test_value_axis_labels_show_only_where_their_plot_is_as_tall_as_the_label(qtbot, source):
    """In a short window the vertical unit labels of plots above one another ran into each
    other: a plot shorter than its label shows its values without the label."""
    from PySide6.QtGui import QFontMetrics
    for height in (300, 1400):
        w = shown_panel(qtbot, source, 600, height)
        visible = []
        for key, plot in w.plots.items():
            axis = plot.getAxis("left")
            fits = plot.vb.height() >= QFontMetrics(axis.label.font()).horizontalAdvance(axis.labelText) + 8
            assert axis.label.isVisible() == fits, (key, height, plot.vb.height())
            visible.append(fits)
        assert all(visible) if height == 1400 else not all(visible)       # "requests", "tokens/s": hidden


def test_the_plots_of_a_column_stay_aligned_whether_their_labels_show_or_not(qtbot, source):
    """The step axes are linked: a plot whose y label is hidden keeps its axis width, so a step
    sits at the same x in every plot of a column."""
    w = shown_panel(qtbot, source, 600, 330)        # short plots: some labels hidden
    lefts = {}
    for key, plot in w.plots.items():
        lefts.setdefault(round(plot.mapRectToScene(plot.boundingRect()).left()), set()).add(
            round(plot.vb.mapRectToScene(plot.vb.boundingRect()).left()))
    assert all(len(v) == 1 for v in lefts.values()), lefts
    assert any(not p.getAxis("left").label.isVisible() for p in w.plots.values())


def test_the_no_efficiency_note_is_never_cut_by_its_plot(qtbot, source):
    """Without device peaks the efficiency plot says why; in a short window the wrapped note was
    taller than its plot and lost its first and last lines: it takes a one-line form there."""
    from ui.views.metrics_plots import EFFICIENCY_NOTE_SHORT
    for height, short in ((1200, False), (300, True)):
        w = MetricsPlots()
        qtbot.addWidget(w)
        w.set_records(source.records(0, 31), 30, 39)       # the fake run names no peaks
        w.resize(600, height)
        w.show()
        qtbot.waitExposed(w)
        note, plot = w.efficiency_note, w.plots["efficiency"]
        assert note.isVisible() and note.textItem.boundingRect().height() <= plot.vb.height()
        assert (note.textItem.toPlainText() == EFFICIENCY_NOTE_SHORT) == short
        assert "names no device peaks" in plot.toolTip()
