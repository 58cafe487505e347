"""TensorBoard: event files through torch's SummaryWriter (it needs the tensorboard package)."""
from __future__ import annotations

from typing import Any

from ..changes import ChangePoint
from ..windows import WindowSummary
from . import PREFIX, MissingPackage, change_text, scalars, x_of


class TensorBoardExporter:
    name = "tensorboard"

    def __init__(self, logdir: str):
        try:
            import tensorboard  # type: ignore[import-untyped]  # noqa: F401
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise MissingPackage("--tensorboard needs the tensorboard package (pip install tensorboard); not "
                                 "written") from None
        self.logdir = logdir
        # flush_secs: a live TensorBoard sees a window within seconds of its cut
        self.writer: Any = SummaryWriter(log_dir=logdir, flush_secs=10)

    def window(self, w: WindowSummary) -> None:
        x = x_of(w)
        for tag, v in scalars(w).items():
            self.writer.add_scalar(tag, v, x)

    def change(self, c: ChangePoint) -> None:
        self.writer.add_text(f"{PREFIX}change_points", change_text(c), c.step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
