"""Stacked bar of a step's GPU memory (weights, gradients, optimizer state, activations, workspace) against the card.

Reads only the breakdown dict (``MemoryBreakdown.to_dict()``), so a saved JSON report can be re-plotted elsewhere.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from ..record.read import view  # noqa: E402
from .output import write_png  # noqa: E402

_GIB = 1024**3
# (key in the breakdown dict, legend label, color): bottom to top in the order memory is allocated in a step.
PARTS = (
    ("weights_bytes", "weights", "#4c72b0"),
    ("gradients_bytes", "gradients", "#55a868"),
    ("optimizer_bytes", "optimizer state", "#8172b2"),
    ("activations_bytes", "activations", "#dd8452"),
    ("workspace_bytes", "workspace (CUDA context, cuDNN/cuBLAS, fragmentation)", "#937860"),
)


@dataclass(frozen=True)
class Breakdown:
    """What the plot reads of the breakdown dict (``MemoryBreakdown.to_dict()`` writes every field; a dict saved
    elsewhere may lack some: a part absent is none of it, a setting absent is not said)."""
    weights_bytes: int = 0
    gradients_bytes: int = 0
    optimizer_bytes: int = 0
    activations_bytes: int = 0
    workspace_bytes: int = 0
    total_bytes: int = 0
    precision: str = "fp32"
    amp: bool = False
    model: str | None = None
    mode: str | None = None
    batch_size: int | None = None
    image_size: int | None = None

    def part(self, key: str) -> float:
        """One of :data:`PARTS`' keys."""
        return float(getattr(self, key))


def plot_fit(breakdown: dict, gpu_bytes: int | None, path: str | Path) -> Path:
    """Write the PNG to ``path`` (parent folders created) and return it; no capacity line when ``gpu_bytes`` is None."""
    bd = view(Breakdown, breakdown)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9.0, 5.2), dpi=110)
    try:
        bottom = 0.0
        for key, label, color in PARTS:
            value = bd.part(key) / _GIB
            if value <= 0:
                continue
            ax.bar([0], [value], bottom=[bottom], width=0.5, color=color, label=f"{label}: {value:.2f} GiB")
            bottom += value
        total = bd.total_bytes / _GIB
        ax.text(0, bottom, f"{total:.2f} GiB", ha="center", va="bottom", fontsize=10)
        top = bottom
        if gpu_bytes:
            cap = gpu_bytes / _GIB
            fits = bd.total_bytes <= gpu_bytes
            ax.axhline(cap, color="#c44e52" if not fits else "#333333", linestyle="--", linewidth=1.5,
                       label=f"GPU capacity: {cap:.2f} GiB ({'fits' if fits else 'does not fit'})")
            top = max(top, cap)
        ax.set_ylim(0, top * 1.18 if top > 0 else 1)
        ax.set_xlim(-0.8, 0.8)
        precision = bd.precision + ("+amp" if bd.amp else "")
        ax.set_xticks([0], [f"batch {bd.batch_size}"])
        ax.set_xlabel(f"{bd.mode} step, {precision}, {bd.image_size} px images")
        ax.set_ylabel("GPU memory (GiB)")
        ax.set_title(f"Will it fit? {bd.model} {bd.mode}, batch {bd.batch_size}")
        handles, labels = ax.get_legend_handles_labels()
        # the stack's parts top first, as the bar reads, then the capacity line
        pairs = sorted(zip(handles, labels), key=lambda hl: (hl[1].startswith("GPU capacity"), -labels.index(hl[1])))
        ax.legend([h for h, _ in pairs], [lab for _, lab in pairs], loc="upper left",
                  bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        return write_png(fig, path)  # a full disk leaves no truncated PNG
    finally:
        plt.close(fig)


def plot_name(breakdown: dict) -> str:
    """The PNG's file name: fit_<model>_<mode>_b<batch>_<precision>[-amp].png, safe as one path component."""
    prec = breakdown["precision"] + ("-amp" if breakdown["amp"] else "")
    name = f"fit_{breakdown['model']}_{breakdown['mode']}_b{breakdown['batch_size']}_{prec}.png"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def render(result: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: the plot of ``fit``'s result dict (what ``fit --json`` prints) in ``out_dir``."""
    return plot_fit(result["breakdown"], result["gpu_bytes"], Path(out_dir) / plot_name(result["breakdown"]))
