"""An image item for the views' packed-colour images, painted without conversion."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QImage


class PackedImageItem(pg.ImageItem):
    """A ``pg.ImageItem`` (row-major) showing a ``(h, w)`` uint32 image of packed
    ``0xffRRGGBB`` pixels (``ui.style.colors.packed``) as a ``QImage.Format_RGB32`` that shares the
    array's memory: no levels, no lookup table, and no colour conversion when it is painted
    (an RGBA8888 image is converted on every paint: 5-10x slower to draw)."""

    def __init__(self, **kwargs):
        super().__init__(axisOrder="row-major", **kwargs)

    def set_packed(self, image: np.ndarray) -> None:
        """Show ``image`` (uint32 ``(h, w)``; change it only through :meth:`columns_changed`)."""
        self.setImage(np.ascontiguousarray(image, np.uint32), autoLevels=False)

    def columns_changed(self, first: int, last: int) -> None:
        """Columns ``first..last`` of the shown image were changed in place: repaint that strip
        only (the ``QImage`` shares the array's memory; the rest of the view is not redrawn)."""
        if self.image is None or self._renderRequired:
            return
        # a pixel more on every side: the view rounds the strip to whole screen pixels, and a
        # scaled image's edge pixel can fall just outside it
        self.update(QRectF(first - 1, -1, last - first + 3, self.image.shape[0] + 2))

    def render(self) -> None:
        img = self.image
        if img is None or img.size == 0:
            self._unrenderable = True
            return
        h, w = img.shape
        self.qimage = QImage(img.data, w, h, 4 * w, QImage.Format.Format_RGB32)
        self._renderRequired = False
        self._unrenderable = False
