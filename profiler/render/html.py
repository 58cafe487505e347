"""report.html: one self-contained page (inline CSS, PNGs inlined as base64, no JavaScript, no network).

Why self-contained: the report gets mailed, attached to issues and opened on machines without the tool or a network;
a page that loads nothing cannot break offline and leaks nothing when opened. Why no JS: nothing here needs it, and
a page without scripts cannot log console errors or be blocked by a browser's policy.

Privacy: the page shows only what the record holds (the environment probe records no hostnames, users or environment
variables) and renders paths as the record has them. As a second guard, keys that name secrets are never rendered.
"""
from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import vocab
from ..analysis.headline import device_words, headline, key_figures, no_change
from ..record.read import SkippedFileView, read, view
from ..redact import is_sensitive_key, redact_argv, redact_text
from .jinja import environment
from .loader_facts import loader_lines
from .output import write_atomic
from .spans import timeline_steps
from .trace import DetailPlan, plan_detail
from .units import ms as _ms
from .units import nbytes, printable, short_gain, stage_color, stage_label, stage_order
from .units import pct as _pct
from .whatif_rows import table_rows

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

# Verdict color by bottleneck: red for input stalls the user can fix in the loader, amber for transfer, green when
# the model itself is the limit (the input keeps up), magenta for "does not fit".
BOTTLENECK_COLORS = {"compute": "#2e7d32", "io": "#c62828", "cpu": "#d84315", "transfer": "#b7791f",
                      "memory": "#8e24aa"}
# Skipped-file rows listed in the page; the count is always exact. A dataset with 10^5 broken files must not make a
# 50 MB page.
SKIPPED_ROWS_MAX = 200
# Lists longer than this in a key/value table are shortened (the record has them whole).
LIST_ITEMS_MAX = 16
# Title and caption of each plot the registry writes (profiler.render.REPORT), in the order the page shows them.
FIGURES = {
    "step_time": ("Where each step's time went",
                  "Every measured step as one bar: the compute device working (green) and waiting for input, the wait "
                  "split by what the awaited batch was doing (its stage). Steady short waits and bursts of long ones "
                  "look different here; the totals by cause, with the kernel's view, are under Idle time by cause."),
    "where_time_went": ("Where the time went",
                        "The measured window split into time the compute device was busy and time it sat idle "
                        "waiting for input, by cause; below, the idle part alone, split by what the worker producing "
                        "the awaited batch was doing (and, when recorded, by what the kernel saw it do)."),
    "timeline": ("Timeline of the first steps",
                 "One lane for the main loop (wait for the batch, H2D copy, compute), one strip for the idle time of "
                 "each measured step split by stage, and one lane per worker (each sample split into its stages: "
                 "read, decode, augment, your own stages, the rest of __getitem__; collate per batch; boxes are "
                 "batches). The label over a wait names the worker whose batch the loop waited for."),
    "utilisation": ("Utilisation",
                    "What the machine was doing while the run went on: CPU per core and per process, disk reads, "
                    "memory, and the GPU when one was used. The shaded band is the measured window."),
    "latency": ("Latency distributions",
                "How long each stage took per observation, on a log scale; vertical lines mark p50, p95 and p99 from "
                "the analysis. A long right tail in read or decode is what stalls individual steps."),
    "what_would_help": ("What would help",
                        "Left: the samples/s each stage could sustain alone (measured or derived), the lowest sets "
                        "the pace. Right: samples/s predicted from this run for each setting, with its 95 % "
                        "interval, colored by the stage that would then bind; the table below has the numbers."),
}



def fmt_value(key: str, v: Any) -> str:
    """A record value as a person reads it: bytes in MB/GB, fractions in %, lists shortened."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    k = key.lower()
    if isinstance(v, (int, float)) and "bytes" in k and not k.endswith("per_s"):
        return f"{nbytes(float(v))} ({int(v):,} B)" if float(v) >= 1000 else f"{int(v):,} B"
    if isinstance(v, (int, float)) and k.endswith("per_s") and "bytes" in k:
        return f"{nbytes(float(v))}/s"
    if isinstance(v, float) and (k == "fraction" or k.endswith("_fraction")) and 0 <= v <= 1:
        return _pct(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "—"
        return f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        if all(not isinstance(x, (dict, list)) for x in v):
            items = [fmt_value("", x) for x in v[:LIST_ITEMS_MAX]]
            more = f" … ({len(v)} in all)" if len(v) > LIST_ITEMS_MAX else ""
            return ", ".join(items) + more
        return f"{len(v)} entries (see run.json)"
    s = printable(redact_text(str(v)))  # a secret-looking value is hidden even where its key says nothing
    return s if len(s) <= 600 else s[:600] + " …"


def flatten(d: Any, prefix: str = "", skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Nested dicts as (dotted key, formatted value) rows; sensitive keys and ``skip`` paths left out."""
    rows: list[tuple[str, str]] = []
    if not isinstance(d, dict):
        return [(prefix or "value", fmt_value(prefix, d))]
    for k, v in d.items():
        key = printable(f"{prefix}.{k}" if prefix else str(k))
        if is_sensitive_key(str(k)) or key in skip:
            continue
        if isinstance(v, dict) and v:
            rows += flatten(v, key, skip)
        elif isinstance(v, dict):
            rows.append((key, "—"))
        else:
            rows.append((key, fmt_value(str(k), v)))
    return rows


def _device_line(rec: RunRecord) -> str:
    dev = read(rec).device
    if dev.type == "cpu":
        what = "the loop ran (no model)" if device_words(rec) == "the loop (no model)" else "the model ran"
        return printable(f"No GPU: {what} on the CPU ({dev.name or 'CPU'}); idle time is the main "
                         "thread's wait for the next batch, timed with host clocks.")
    return printable(f"Compute device: {dev.name or dev.type} ({dev.type}"
                     f"{'' if dev.index is None else ':' + str(dev.index)}); timing from "
                     f"{dev.timing or 'host clocks'}.")


# The lead figure (above the fold) and the one the What-would-help section shows; the Plots section has the rest.
LEAD_FIGURE = "step_time"
WHATIF_FIGURE = "what_would_help"


def _top_recommendation(rec: RunRecord) -> dict[str, str] | None:
    """The first recommendation, its expected gain cut to its lead clause (the whole text is in Recommendations)."""
    recs = read(rec).verdict.recommendations
    if not recs:
        return None
    r = recs[0]
    full = printable(r.expected_gain)
    return {"action": printable(r.action), "gain": short_gain(full), "full": full}


# What the kernel saw the producing threads do, per verdict cause, when that (not the stage) is the headline's cause.
_KERNEL_WORDS = {"io": ("blocked_device", "blocked on storage reads"),
                 "cpu": ("runqueue", "waiting for a free core")}


def _lead_note(rec: RunRecord) -> str | None:
    """A line under the step chart when the headline names what the chart cannot show. The chart splits each wait
    by the stage the awaited batch was in (a dataset that reads its files in plain ``__getitem__`` code shows as
    "your __getitem__"), while "mostly for storage reads" or "mostly for a free core" can come from the kernel's view
    (blocked on the device; waiting in the run queue). Without the line the bars seem to contradict the headline."""
    r = read(rec)
    st = r.stall
    cause = r.verdict.bottleneck or ""
    idle = float(st.seconds)
    if cause not in _KERNEL_WORDS or idle <= 0:
        return None
    kinds = {k: float(v) for k, v in st.by_kind.items() if isinstance(v, (int, float))}
    stages = {k: float(v) for k, v in st.by_stage.items() if isinstance(v, (int, float))}
    kind, words = _KERNEL_WORDS[cause]
    top = max(stages, key=lambda k: stages[k]) if stages else None
    top_cause = vocab.STAGE[top].cause if top in vocab.STAGE else None
    shown = top_cause == cause and (cause != "cpu" or kinds.get("runqueue", 0.0) <= kinds.get("on_cpu", 0.0))
    if shown or kinds.get(kind, 0.0) <= 0.25 * idle:
        return None
    return (f"The bars show the stage each awaited batch was in; per the kernel, the threads making those batches "
            f"spent {_pct(kinds[kind] / idle, 0)} of the wait {words} (Idle by cause).")


def _stage_rows(rec: RunRecord) -> list[dict[str, Any]]:
    rows = []
    stages = read(rec).stages
    for name in stage_order(stages):
        s = stages[name]
        rows.append({"label": printable(stage_label(name)), "color": stage_color(name),
                     "per": printable(s.per or ""), "count": f"{s.count:,}", "total": f"{s.total_s:.3f}",
                     **{k: _ms(0 if x is None else x) for k, x in (("mean", s.mean_ms), ("p50", s.p50_ms),
                                                                  ("p95", s.p95_ms), ("p99", s.p99_ms),
                                                                  ("max", s.max_ms))}})
    return rows


def _stall_rows(rec: RunRecord) -> tuple[list[dict], list[dict], list[dict], str]:
    st = read(rec).stall
    idle, window = float(st.seconds), float(rec.window["seconds"])
    by_cause, by_stage = st.by_cause, st.by_stage
    causes = [{"label": c.label, "color": c.color, "seconds": f"{float(by_cause[c.name]):.3f}",
               "share": _pct(by_cause[c.name] / idle) if idle > 0 else "—",
               "of_window": _pct(by_cause[c.name] / window) if window > 0 else "—"}
              for c in vocab.CAUSES if c.name in by_cause]
    detail = [{"label": printable(stage_label(k)), "color": stage_color(k), "seconds": f"{float(by_stage[k]):.3f}",
               "share": _pct(by_stage[k] / idle) if idle > 0 else "—"}
              for k in stage_order(by_stage)]
    by_kind = st.by_kind
    kinds = [{"label": f"{k.replace('_', ' ')}: {words}", "color": vocab.color(cause),
              "seconds": f"{float(by_kind[k]):.3f}", "share": _pct(by_kind[k] / idle) if idle > 0 else "—"}
             for k, (cause, words) in vocab.KINDS.items() if k in by_kind]
    line = (f"The compute device sat idle for {idle:.3f} s of the {window:.3f} s measured window "
            f"({_pct(st.fraction)}).")
    return causes, detail, kinds, line


def _findings(rec: RunRecord) -> list[dict[str, str]]:
    """Each finding as kind + one message; a finding without a message shows its fields instead of nothing."""
    out = []
    for raw, f in zip(rec.findings, read(rec).findings):
        fields = raw if isinstance(raw, dict) else {"message": f.message}
        msg = f.message or "; ".join(f"{k}: {v}" for k, v in flatten(
            {k: v for k, v in fields.items() if k != "kind"}))
        out.append({"kind": printable("finding" if f.kind is None else f.kind), "message": printable(msg)})
    return out


def _figures(images: dict[str, Any]) -> list[dict[str, Any]]:
    from . import renderer

    out: list[dict[str, Any]] = []
    for key, (title, caption) in FIGURES.items():
        p = images.get(key)
        fig: dict[str, Any] = {"key": key, "file": renderer(key).file, "title": title, "caption": caption,
                               "data_uri": None, "width": None, "height": None, "error": "no image was written"}
        if p is not None and not isinstance(p, str) and Path(p).is_file():
            data = Path(p).read_bytes()
            fig["data_uri"] = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
            if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:  # IHDR width/height: lets the page lay out early
                fig["width"] = int.from_bytes(data[16:20], "big")
                fig["height"] = int.from_bytes(data[20:24], "big")
        elif isinstance(p, str):
            fig["error"] = printable(p)
        out.append(fig)
    return out


def _job_rows(rec: RunRecord) -> list[tuple[str, str]]:
    """What the profiled job was (run.json v2 ``job``): the script and the loader it iterated, when recorded. Every
    key the record holds is shown as it is (a key/value table of the sections, not a read of chosen fields)."""
    job = rec.job
    if not job:
        return []
    loader: dict[str, Any] = dict(rec.loader or {})
    head: dict[str, Any] = {k: v for k, v in job.items()
                            if k in ("kind", "target", "argv", "then", "ended", "other_loaders", "window_restarts")}
    if isinstance(head.get("argv"), list):  # a record made before argv was redacted at collection
        head["argv"] = redact_argv([str(a) for a in head["argv"]])
    facts = {k: loader[k] for k in ("dataset_class", "created_at") if k in loader}
    rest = {k: v for k, v in loader.items() if k not in facts}
    others = [o for o in job.get("other_loader_figures") or [] if isinstance(o, dict)]
    return flatten({"job": head}) + flatten({"job.loader": {**facts, **rest}}) + \
        [row for i, o in enumerate(others) for row in flatten(o, f"job.other_loader_figures[{i}]")]


def report_context(rec: RunRecord, images: dict[str, Any], plan: DetailPlan | None = None) -> dict[str, Any]:
    """Everything the template shows, as plain strings and lists."""
    plan = plan or plan_detail(rec)
    steps = [int(x) for x in rec.timeline["steps"]["step"]]
    lo, hi = timeline_steps(rec)
    desc = plan.describe(steps)
    n = len(steps)
    detail_line = (f"Timeline plot: steps {steps[lo]}–{steps[hi - 1]} of {n:,}. " if hi > lo else "") + \
                  f"trace.json: main loop {desc['main_loop']}; workers {desc['workers']}."
    causes, detail, kinds, stall_line = _stall_rows(rec)
    skipped = [{"path": printable("?" if v.path is None else v.path), "reason": printable(v.reason or "")}
               if isinstance(f, dict) else {"path": printable(f), "reason": ""}
               for f, v in ((f, view(SkippedFileView, f)) for f in rec.skipped_files[:SKIPPED_ROWS_MAX + 1])]
    n_skipped = len(rec.skipped_files)
    env = {k: v for k, v in (rec.environment or {}).items() if k not in ("storage", "residency_start")}
    env_rows = flatten({"compute_device": rec.compute_device}) + flatten(env)
    storage_rows = flatten(rec.storage) if rec.storage else []
    memory_rows = flatten(rec.memory, skip=("breakdown.profile",)) if rec.memory else []
    ram = read(rec).ram
    ram_process_rows = [
        (f"{p.role}{'' if p.worker_id is None else ' ' + str(p.worker_id)}", str(p.pid),
         *(fmt_value("bytes", b) for b in (p.peak_rss_bytes, p.peak_pss_bytes, p.peak_uss_bytes)))
        for p in ram.process_rows]
    ram_projection_rows = [
        (str(r.workers), fmt_value("bytes", r.projected_bytes), fmt_value("bytes", r.available_bytes),
         "yes" if r.fits else "no" if r.fits is False else "—", r.warning or "")
        for r in ram.projection_rows]
    sections = [("verdict", "Verdict"), ("recommendations", "Recommendations"), ("whatif", "What would help"),
                ("plots", "Plots"),
                ("stages", "Stage statistics"), ("stall", "Idle by cause"), ("config", "Configuration"),
                ("environment", "Environment"), ("storage", "Storage"), ("memory", "Memory"),
                ("skipped", "Skipped files"), ("findings", "Findings"), ("files", "Files & detail")]
    verdict = rec.verdict
    r = read(rec)
    figures = _figures(images)
    rows, notes, bounds = table_rows(rec)
    return {
        "headline": printable(headline(rec)), "cards": [{"value": printable(f.value), "label": printable(f.label)}
                                                        for f in key_figures(rec)],
        "lead": next((f for f in figures if f["key"] == LEAD_FIGURE), None), "lead_note": _lead_note(rec),
        "whatif_figure": next((f for f in figures if f["key"] == WHATIF_FIGURE), None),
        "plot_figures": [f for f in figures if f["key"] not in (LEAD_FIGURE, WHATIF_FIGURE)],
        "top_rec": _top_recommendation(rec), "no_change": printable(no_change(rec)), "whatif_rows": rows,
        "whatif_notes": notes,
        "whatif_bounds": [b for b in bounds if b["words"] != b["label"]],
        "verdict": verdict, "accent": BOTTLENECK_COLORS.get(r.verdict.bottleneck or "", "#455a64"),
        "partial": bool(rec.partial), "partial_reason": rec.partial_reason, "device_line": _device_line(rec),
        "loader_lines": loader_lines(rec),
        "sections": [{"id": i, "title": t} for i, t in sections],
        "recommendations": r.verdict.recommendations, "figures": figures,
        "detail_line": detail_line, "stage_rows": _stage_rows(rec), "cause_rows": causes, "detail_rows": detail,
        "kind_rows": kinds,
        "stall_line": stall_line, "stall_method": printable(r.stall.method or "not recorded"),
        "config_rows": _job_rows(rec) + flatten(rec.config) + flatten({"dataset": rec.dataset}),
        "environment_rows": env_rows,
        "storage_rows": storage_rows,
        "memory_rows": memory_rows, "skipped_rows": skipped[:SKIPPED_ROWS_MAX],
        "ram_process_rows": ram_process_rows, "ram_projection_rows": ram_projection_rows,
        "shm_peak": fmt_value("bytes", r.ram.shm_peak_bytes),
        "skipped_more": n_skipped > SKIPPED_ROWS_MAX,
        "skipped_count": printable(rec.skipped["count"]), "findings": _findings(rec),
        "trace_detail": [("main-loop spans in trace.json", desc["main_loop"]),
                         ("worker spans in trace.json", desc["workers"]),
                         ("sampled counters in trace.json", desc["counters"]),
                         ("timeline.png", f"steps {steps[lo]}–{steps[hi - 1]} of {n:,}" if hi > lo else "no steps")],
        "created": printable(rec.created_utc), "tool_version": printable(r.tool.version or "?"),
        "schema_version": rec.schema_version,
        **_whatif_context(rec),
    }


def _whatif_context(rec: RunRecord) -> dict[str, Any]:
    """What would help: the same rows as the terminal (render/whatif_rows.py)."""
    from .whatif_rows import ceiling_rows, headline, notices, prediction_rows

    return {"whatif_line": headline(rec), "ceiling_rows": ceiling_rows(rec), "prediction_rows": prediction_rows(rec),
            "whatif_notices": notices(rec)}


def render_html(rec: RunRecord, images: dict[str, Any], plan: DetailPlan | None = None) -> str:
    """The page as a string. ``images`` maps figure key → PNG path (or an error string when drawing failed)."""
    return environment().get_template("report.html.j2").render(**report_context(rec, images, plan))


def write_html(rec: RunRecord, path: str | Path, images: dict[str, Any], plan: DetailPlan | None = None) -> Path:
    return write_atomic(path, render_html(rec, images, plan))


def render(rec: RunRecord, out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: report.html, inlining the plots written before it (``ctx["results"]``)."""
    if "plan" not in ctx:
        ctx["plan"] = plan_detail(rec)
    return write_html(rec, Path(out_dir) / "report.html", ctx.get("results") or {}, ctx["plan"])
