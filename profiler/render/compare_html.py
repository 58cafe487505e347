"""compare.html (one self-contained page: inline CSS, the figure as a data: URI, nothing fetched) and compare.json.

Reads the dict of ``profiler.analysis.compare.compare`` only; the rows come from compare_rows.py, shared with the
terminal table.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ..analysis.headline import compare_headline
from ..record import json_safe
from ..record.read import ConfigView, LoaderView, view
from ..record.read_docs import Metric, comparison_view
from .compare_rows import GROUP_TITLES, groups, rows
from .jinja import environment
from .output import write_atomic
from .units import printable, safe


def render_html(comparison: dict[str, Any], png: bytes | None, stages_png: bytes | None = None) -> str:
    """The whole page as one string: inline CSS, the PNGs as data: URIs, no external resource of any kind. ``png``
    is the lead picture (throughput and stall by cause, compare_plots part "lead"; compare.png's four panels work
    too), ``stages_png`` the per-stage panels shown beside the metrics."""
    shown, omitted = rows(comparison)
    return environment().get_template("compare.html.j2").render(
        headline=printable(compare_headline(comparison)), cards=_cards(comparison), changed=_changed(comparison),
        run_rows=_run_rows(comparison), stories=_stories(comparison),
        c=safe(comparison), groups=groups(shown), titles=GROUP_TITLES, omitted=omitted,
        png_b64=base64.b64encode(png).decode("ascii") if png else None,
        stages_b64=base64.b64encode(stages_png).decode("ascii") if stages_png else None)


def _stories(c: dict[str, Any]) -> list[str]:
    """Each run's story (analysis/compare.py), less what the page already said above it: with two runs the h1 is the
    story's first sentence and the changed line its "Differences"; what is left (a partial run's note) stays."""
    head = compare_headline(c).rstrip(".")
    out = []
    for s in comparison_view(c).sentences.values():
        s = str(s)
        if s.startswith(head):
            s = s[len(head):].lstrip(". ")
            note = s.find("Note:")
            s = s[note:] if note >= 0 else ""
        if s.strip():
            out.append(printable(s.strip()))
    return out


def _changed(c: dict[str, Any]) -> list[str]:
    """"B: workers 0 → 2" per run after the baseline: what differs, said under the answer (the headline says which
    run is faster and where the time moved; this says what was changed to get there)."""
    out = []
    cv = comparison_view(c)
    for lab in cv.config_diffs:
        texts = [d.text for d in cv.diffs(lab) if d.text]
        if len(cv.runs) == 2 and len(texts) <= 1:
            continue  # said by the "what changed" card
        out.append(printable(f"{cv.baseline} → {lab}: " + ("; ".join(texts) if texts else "same configuration")))
    return out


def _run_rows(c: dict[str, Any]) -> list[dict[str, Any]]:
    """The Runs table's cells: a script's run has no model, batch size or workers in its config; its loader's (job
    facts) and its script's name are shown instead of empty cells."""
    out = []
    for r in comparison_view(c).runs:
        cfg, loader = view(ConfigView, r.config), view(LoaderView, r.loader)
        target = r.target
        model = cfg.model or (Path(str(target)).name if target else None)
        out.append({"model": printable(model) if model else "—", "batch": _either(cfg.batch_size, loader.batch_size),
                    "workers": _either(cfg.workers, loader.num_workers)})
    return out


def _either(run: int | None, loader: int | None) -> str:
    """The config's figure, else the loader's (a script's run has it there), else "—"."""
    v = loader if run is None else run
    return "—" if v is None else printable(v)


def _cards(c: dict[str, Any]) -> list[dict[str, str]]:
    """One card per run (up to five): its throughput and idle share, named by label and folder; with two runs, also
    the ratio (with its interval and the noise test) and what changed."""
    cv = comparison_view(c)
    thr, idle = cv.metric("throughput") or Metric(), cv.metric("stall_fraction") or Metric()
    out = []
    for i, r in enumerate(cv.runs[:5]):
        tp = (thr.values or [None] * (i + 1))[i]
        fr = (idle.values or [None] * (i + 1))[i]
        value = "—" if tp is None else f"{float(tp):,.1f} samples/s"
        label = f"{r.label}: {r.name}" + ("" if fr is None else f", waiting {float(fr) * 100:.1f} %")
        out.append({"value": value, "label": printable(label)})
    v = thr.versus(1) if len(thr.vs_baseline) > 1 else None
    if len(cv.runs) == 2 and v is not None and v.ratio is not None:
        # two runs: the ratio, with its interval and whether it is beyond the runs' noise
        ci = v.ci
        iv = f"95 %: {float(ci[0]):.2f}–{float(ci[1]):.2f}x" if isinstance(ci, list) and len(ci) == 2 else ""
        noise = "beyond noise" if v.significant else "within noise"
        labels = cv.labels or ["A", "B"]
        out.append({"value": f"{float(v.ratio):.2f}x", "label": printable(
            f"{labels[1]} vs {labels[0]} ({', '.join(x for x in (iv, noise) if x)})")})
        diffs = [str(d.text) for d in cv.diffs(labels[1])]
        out.append({"value": printable(diffs[0] if diffs else "same settings"),
                    "label": printable("what changed" + (f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""))})
    return out


def render(comparison: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: compare.html, inlining compare.png when it was drawn before (``ctx["results"]``)."""
    png_path = (ctx.get("results") or {}).get("compare_png")
    lead = stages = None
    if isinstance(png_path, Path) and png_path.is_file():  # plots on: the page's two pictures, drawn from the dict
        from .compare_plots import render_png

        lead, stages = render_png(comparison, part="lead"), render_png(comparison, part="stages")
    return write_atomic(Path(out_dir) / "compare.html", render_html(comparison, lead, stages))


def render_json(comparison: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """compare.json: the whole comparison, for scripts."""
    return write_atomic(Path(out_dir) / "compare.json", json.dumps(json_safe(comparison), indent=1, allow_nan=False))
