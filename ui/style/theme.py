"""Dark theme for the window: a QPalette, a small style sheet, and pyqtgraph defaults.

The style sheet has no rule for item views on purpose: a ``QTableView`` rule sends every cell
through Qt's style-sheet painter, ~8x slower (6 ms instead of 0.7 ms for one table a frame);
tables take their colours from the palette (Base, AlternateBase, Highlight). Nor has it a rule
for every ``QWidget`` (the font size is set as a font): such a rule resets the palette of
widgets it styles, tables included, to the application's. Scroll bars are flat (a handle on the
base colour): the style's own scroll bar costs ~0.6 ms a paint, and the tables' scroll bars are
repainted whenever their queues change, several times a frame; a flat one costs ~0.02 ms.
"""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication, QGraphicsItem, QHBoxLayout, QLabel, QWidget

from ui.fitted_label import FittedLabel
from ui.style.colors import BACKGROUND, MUTED, TEXT, css

PANEL = "#202226"
BASE = "#1b1c20"
ACCENT = "#4e79a7"
PLOT_BG = css(BACKGROUND)
PLOT_FG = css(TEXT)

STYLE = f"""
QGroupBox {{ border: 1px solid #34373d; border-radius: 4px; margin-top: 1.2em; padding-top: 4px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 8px; padding: 0 4px; color: {css(TEXT)};
                   font-weight: bold; }}
QPlainTextEdit, QAbstractSpinBox, QComboBox, QLineEdit {{
    background: {BASE}; color: {css(TEXT)}; border: 1px solid #34373d; }}
QTabWidget::pane, QStackedWidget#queuePane {{ border: 1px solid #34373d; top: -1px; }}
QTabBar::tab {{ background: #26282d; color: {css(MUTED)}; border: 1px solid #34373d;
               padding: 4px 12px; }}
QTabBar::tab:selected {{ background: {BASE}; color: {css(TEXT)}; }}
QMenu {{ background: #26282d; color: {css(TEXT)}; }}
QMenu::item:selected {{ background: #3b5f87; }}
QMenu::item:disabled {{ color: #6b6f76; }}
QHeaderView::section {{ background: #26282d; color: {css(MUTED)}; border: none;
                        border-right: 1px solid #34373d; padding: 3px 5px; }}
QStatusBar QLabel {{ padding: 0 8px; }}
QToolButton, QPushButton {{ padding: 3px 9px; }}
QToolButton:checked {{ background: {ACCENT}; color: white; border-radius: 3px; }}
QScrollBar:vertical {{ background: {BASE}; width: 12px; margin: 0; border: none; }}
QScrollBar:horizontal {{ background: {BASE}; height: 12px; margin: 0; border: none; }}
QScrollBar::handle {{ background: #4a4d55; border-radius: 3px; min-height: 20px; min-width: 20px; }}
QScrollBar::handle:hover {{ background: #5d616b; }}
QScrollBar::handle:disabled {{ background: transparent; }}
QScrollBar::add-line, QScrollBar::sub-line {{ width: 0; height: 0; border: none; background: none; }}
QScrollBar::add-page, QScrollBar::sub-page {{ background: none; }}
"""


def dark_palette() -> QPalette:
    p = QPalette()
    roles = {
        QPalette.Window: PANEL, QPalette.WindowText: css(TEXT), QPalette.Base: BASE,
        QPalette.AlternateBase: "#232529", QPalette.ToolTipBase: "#2b2d31",
        QPalette.ToolTipText: css(TEXT), QPalette.Text: css(TEXT), QPalette.Button: "#2b2d31",
        QPalette.ButtonText: css(TEXT), QPalette.Highlight: "#3b5f87",
        QPalette.HighlightedText: "#ffffff", QPalette.Link: ACCENT,
        QPalette.PlaceholderText: css(MUTED),
    }
    for role, color in roles.items():
        p.setColor(role, QColor(color))
    for role in (QPalette.Text, QPalette.ButtonText, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#6b6f76"))
    return p


def apply_theme(widget: QWidget) -> None:
    """Theme ``widget`` and its children (the window themes itself; no global app state)."""
    widget.setPalette(dark_palette())
    font = widget.font()
    font.setPointSize(10)
    widget.setFont(font)
    widget.setStyleSheet(STYLE)


def follow_window(dialog: QWidget, parent: QWidget | None) -> None:
    """Give ``dialog`` (a top-level window) the palette and font of ``parent``, the window that
    opens it: Qt passes a parent's palette and font on to its child widgets but not to child
    windows, so a dialog of the dark window came up in the light system palette (its style-sheet
    parts dark, the rest light). No parent: nothing to follow, nothing changes."""
    if parent is not None:
        dialog.setPalette(parent.palette())
        dialog.setFont(parent.font())


def apply_app_theme(app: QApplication) -> None:
    """Optional, for ``app/``: Fusion style (honours palettes everywhere) + the dark palette."""
    app.setStyle("Fusion")
    app.setPalette(dark_palette())


def fix_size(label: QLabel, template: str) -> QLabel:
    """Give a label whose text changes every frame the fixed size of ``template``: a fixed size
    keeps its text changes from re-laying out the whole window (Qt propagates size-hint changes
    of any widget whose minimum and maximum sizes differ)."""
    label.setFixedSize(label.fontMetrics().boundingRect(template).width() + 16,
                       label.sizeHint().height())
    return label


def title_row(title: str, template: str, short_template: str | None = None) -> tuple[QHBoxLayout, QLabel, FittedLabel]:
    """A view's bold title line: ``title`` (fixed text) then a label for numbers that change
    every frame (``ui.fitted_label.FittedLabel``: sized for ``template``, down to
    ``short_template`` in a narrow window, where ``setText(text, short)`` shows the short form;
    its changes re-lay out nothing: a title of changing width re-lays out the whole window,
    ~1 ms a frame). Returns the row layout, the title label and the numbers label."""
    name = QLabel(title)
    name.setStyleSheet("font-weight: bold;")
    numbers = FittedLabel(template, short_template, bold=True)
    row = QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    row.setSpacing(0)
    row.addWidget(name)
    row.addWidget(numbers)
    return row, name, numbers


def plot_widget(**kwargs) -> pg.PlotWidget:
    """A PlotWidget with the theme's background; menus and mouse zoom off by default."""
    w = pg.PlotWidget(background=PLOT_BG, **kwargs)
    w.setMenuEnabled(False)
    w.getPlotItem().hideButtons()
    return w


def style_axis(axis: pg.AxisItem, label: str = "", units: str | None = None) -> None:
    """Theme ``axis``: colours, a 9-point font, two levels of ticks, text on the major ones,
    ``label`` and ``units``. pyqtgraph's default third tick level (a tick every few pixels) and
    its trial of text on minor ticks (which fits only on wide axes) make laying the axis out
    again ~3x slower: 1 ms instead of 0.35 each time the range moves (the step axes, as the run
    advances). Without ``units`` no SI prefix: pyqtgraph would set the label's HTML again (a
    text layout) on every change of the range to find one."""
    axis.setPen(pg.mkPen(css(MUTED)))
    axis.setTextPen(pg.mkPen(PLOT_FG))
    f = QFont()
    f.setPointSize(9)
    axis.setStyle(tickFont=f, maxTickLevel=1, maxTextLevel=0)
    if units is None:
        axis.enableAutoSIPrefix(False)
    if label:
        axis.setLabel(label, units=units, **{"color": PLOT_FG, "font-size": "9pt"})


def cache_decorations(plot: pg.PlotItem) -> None:
    """Keep the plot's axes and title as pixmaps (``DeviceCoordinateCache``), drawn again only
    when their ticks or text change. A plot scene repaints every item inside the bounding box of
    what changed: with several plots in one scene, or a curve next to an axis, every axis
    would replay its text each frame (~50 us each) although none of it changed. Axes that are
    not shown (pyqtgraph makes all four and hides two) still follow the view's range: without
    an SI prefix to look for, that is all they do (with one, each range change sets their
    label's HTML again, unseen)."""
    for name in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(name)
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        if not axis.isVisible() and not axis.labelUnits:
            axis.enableAutoSIPrefix(False)
    plot.titleLabel.item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
