"""Draw a merged torch.profiler trace (torch_trace.json) as a PNG: the picture in docs/trace_merge.md.

Usage: python scripts/draw_merged_trace.py TORCH_TRACE.json OUT.png [FIRST_STEP] [STEPS]

One lane per thread of the trace, as Perfetto shows them, over STEPS ``ProfilerStep`` spans from FIRST_STEP (default:
the third step in the trace, 4 steps): the job's main thread (kineto's spans, nesting depth downwards), our
``DataLoader wait`` thread (the wait and its causes), each ``DataLoader worker k`` (batch, samples with their stages,
collate), and the flow arrows from each batch to the wait that took it. Colors are the profiler's vocabulary
(profiler/vocab.py). Reads the JSON only: any merged trace, from any machine.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _color(e: dict[str, Any]) -> str:
    from profiler import vocab

    name, cat = str(e.get("name", "")), str(e.get("cat", ""))
    if name.startswith("wait: "):
        return vocab.color(name[6:])
    if name == "DataLoader wait":
        return vocab.color("wait")
    if cat in ("batch",):
        return "#e8e8e8"
    if cat == "sample":
        return vocab.color("getitem")
    if cat == "collate":
        return vocab.color("collate")
    if cat == "stage":
        return vocab.color(name) if name in vocab.STAGE else vocab.stage(name).color
    if name.startswith("ProfilerStep#"):
        return "#d0d0d0"
    if "DataLoader" in name:
        return vocab.color("wait")
    return vocab.color("compute")


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    trace = json.loads(src.read_text())
    events = trace["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    if not steps:
        sys.exit(f"{src}: no ProfilerStep spans")
    first = int(sys.argv[3]) if len(sys.argv) > 3 else min(2, len(steps) - 1)
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    sel = steps[first:first + n]
    lo, hi = sel[0]["ts"], sel[-1]["ts"] + sel[-1]["dur"]
    names: dict[tuple[Any, Any], str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = str(e["args"]["name"])
        if e.get("ph") == "M" and e.get("name") == "process_name" and "DataLoader worker" in str(e["args"]["name"]):
            names[(e["pid"], e["pid"])] = str(e["args"]["name"])
    main = (sel[0]["pid"], sel[0]["tid"])
    lanes: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e["ts"] < hi and e["ts"] + e["dur"] > lo and isinstance(e.get("pid"), int):
            lanes[(e["pid"], e["tid"])].append(e)
    order = [main] + sorted((k for k in lanes if k != main and k[0] == main[0]), key=str) + \
        sorted((k for k in lanes if k[0] != main[0]), key=lambda k: names.get(k, str(k)))
    rows: list[tuple[str, list[tuple[int, dict[str, Any]]]]] = []
    for key in order:
        spans = sorted(lanes[key], key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        placed = []
        for e in spans:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            placed.append((len(stack), e))
            stack.append(e["ts"] + e["dur"])
        depth = min(4, max((d for d, _ in placed), default=0) + 1)
        label = names.get(key, f"pid {key[0]} tid {key[1]}")
        if key == main:
            label = "main thread (torch.profiler)"
        rows.append((label, [(d, e) for d, e in placed if d < depth]))
    heights = [1 + max((d for d, _ in r), default=0) for _, r in rows]
    fig, ax = plt.subplots(figsize=(13, 0.9 + 0.32 * sum(heights)), dpi=90)
    y = 0.0
    centers: dict[tuple[Any, Any, float], float] = {}
    ticks, labels = [], []
    for (label, placed), h in zip(rows, heights):
        for d, e in placed:
            a, b = (max(lo, e["ts"]) - lo) / 1e3, (min(hi, e["ts"] + e["dur"]) - lo) / 1e3
            ax.barh(-(y + d), b - a, left=a, height=0.85, color=_color(e), edgecolor="white", linewidth=0.3)
            if b - a > (hi - lo) / 1e3 * 0.06:
                ax.text((a + b) / 2, -(y + d), str(e["name"])[:28], ha="center", va="center", fontsize=6.5)
            centers[(e["pid"], e["tid"], e["ts"])] = -(y + d)
        ticks.append(-y)
        labels.append(label[:48])
        y += h + 0.4
    flows: dict[Any, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in events:
        if e.get("cat") == "dataloader_flow" and e.get("ph") in ("s", "f"):
            flows[e["id"]][e["ph"]] = e
    lane_y = {k: t for k, t in zip(order, ticks)}
    for f in flows.values():
        if "s" in f and "f" in f and lo <= f["f"]["ts"] <= hi:
            s, t = f["s"], f["f"]
            ys, yt = lane_y.get((s["pid"], s["tid"])), lane_y.get((t["pid"], t["tid"]))
            if ys is not None and yt is not None:
                ax.annotate("", xy=((t["ts"] - lo) / 1e3, yt), xytext=(max(0.0, (s["ts"] - lo) / 1e3), ys),
                            arrowprops={"arrowstyle": "->", "color": "#444444", "lw": 0.7})
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlim(0, (hi - lo) / 1e3)
    ax.set_xlabel(f"ms from {sel[0]['name']} (the job's torch.profiler trace, our tracks merged)")
    ax.set_title("torch_trace.json: kineto's main thread, the DataLoader wait split into causes, the workers' batches",
                 fontsize=10)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    fig.tight_layout()
    from profiler.render.output import write_png

    write_png(fig, out, dpi=90)
    plt.close(fig)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
