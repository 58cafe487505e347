"""Report files (PNG plots, self-contained HTML, Chrome trace) from real short runs and a long synthetic record."""
from __future__ import annotations

import ast
import copy
import html as htmllib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from profiler.analysis import analyze
from profiler.config import RunConfig
from profiler.harness.data import make_sample_dataset
from profiler.harness.runner import execute, prepare
from profiler.record import RunRecord, load
from profiler.render import REPORT_FILES, write_reports
from profiler.render import trace as trace_mod
from profiler.render.html import render_html
from profiler.render.plots import timeline_lanes

REPO = Path(__file__).resolve().parents[1]
SECTION_IDS = ("verdict", "recommendations", "plots", "stages", "stall", "config", "environment", "storage", "memory",
               "skipped", "findings", "files")
MiB = 1024 * 1024


def _run(data: Path, workers: int) -> RunRecord:
    c = RunConfig(data=str(data), steps=6, warmup=2, workers=workers, batch_size=8, model="tiny", image_size=64)
    return analyze(execute(prepare(c)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real short profiles (2 workers; workers=0), their reports written next to their run.json."""
    root = tmp_path_factory.mktemp("render")
    data = make_sample_dataset(root / "data", count=64, size=(160, 120))
    out = {}
    for w in (2, 0):
        rec = _run(data, w)
        d = root / f"w{w}"
        d.mkdir()
        rec.save(d / "run.json")
        out[w] = {"rec": rec, "dir": d, "files": write_reports(rec, d)}
    return out


def _events(d: Path) -> list[dict]:
    return json.loads((d / "trace.json").read_text())["traceEvents"]


# ---------------------------------------------------------------------------------------------------------------------
def test_write_reports_writes_every_file_next_to_run_json(runs):
    r = runs[2]
    assert sorted(p.name for p in r["files"]) == sorted(REPORT_FILES)
    for p in r["files"]:
        assert p.parent == r["dir"] and p.is_file() and p.stat().st_size > 0


@pytest.mark.parametrize("name", [n for n in REPORT_FILES if n.endswith(".png")])
def test_pngs_are_real_readable_images(runs, name):
    p = runs[2]["dir"] / name
    assert p.stat().st_size >= 10_000, f"{name} is suspiciously small"
    with Image.open(p) as im:
        assert im.format == "PNG"
        w, h = im.size
        assert w >= 600 and h >= 300
        grey = np.asarray(im.convert("L"))
    assert grey.std() > 5, f"{name} looks blank"


def test_html_has_verdict_sections_and_no_network_loads(runs):
    rec = runs[2]["rec"]
    page = (runs[2]["dir"] / "report.html").read_text()
    assert rec.verdict["summary"] in htmllib.unescape(page)
    for sid in SECTION_IDS:
        assert f'id="{sid}"' in page, sid
        assert f'href="#{sid}"' in page, f"table of contents lacks {sid}"
    low = page.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low
    for attr in re.findall(r'\bsrc\s*=\s*"([^"]*)"', page, flags=re.I):
        assert attr.startswith("data:image/"), attr[:60]
    for url in re.findall(r"url\(([^)]*)\)", page, flags=re.I):
        assert url.strip("'\" ").startswith("data:"), url
    for href in re.findall(r'\bhref\s*=\s*"([^"]*)"', page, flags=re.I):
        assert "://" not in href and not href.startswith("//"), href
    assert page.count('src="data:image/png;base64,') == 4
    # The compute device is the CPU here, and the page says so.
    assert "No GPU: the model ran on the CPU" in page
    # Recommendations with their numbers.
    for r in rec.verdict["recommendations"]:
        assert htmllib.escape(r["action"]) in page and htmllib.escape(r["expected_gain"]) in page


def test_html_tables_show_exact_aggregates(runs):
    rec = runs[2]["rec"]
    page = (runs[2]["dir"] / "report.html").read_text()
    assert f"{rec.stages['compute']['total_s']:.3f}" in page
    assert f"{rec.stall['seconds']:.3f}" in page
    assert f"{rec.throughput['samples_per_s']:,.1f}" in page
    assert "page_cache_hit_fraction" in page  # storage facts from rec.storage
    assert "all 8 steps" in page  # detail rule stated: a short run keeps every span


def test_html_partial_banner_skipped_files_and_secrets(runs):
    rec = copy.deepcopy(runs[2]["rec"])
    assert 'class="partial"' not in render_html(rec, {})
    rec.partial, rec.partial_reason = True, "interrupted (Ctrl-C) after 3 of 6 measured steps"
    rec.skipped = {"count": 2, "files": [{"path": "/data/cls/bad <1>.jpg", "reason": "cannot identify image file"},
                                         {"path": "/data/cls/empty.jpg", "reason": "empty file"}]}
    rec.environment = dict(rec.environment, api_token="tok-SHOULD-NOT-SHOW", environ={"HOME": "/root/SECRETHOME"})
    page = render_html(rec, {})
    assert 'class="partial"' in page and "interrupted (Ctrl-C) after 3 of 6" in page
    assert "/data/cls/bad &lt;1&gt;.jpg" in page and "cannot identify image file" in page and "empty file" in page
    assert "tok-SHOULD-NOT-SHOW" not in page and "SECRETHOME" not in page
    assert "This plot could not be drawn" in page  # no images given: said, not silently missing


def test_trace_is_valid_chrome_trace_with_named_tracks(runs):
    rec = runs[2]["rec"]
    trace = json.loads((runs[2]["dir"] / "trace.json").read_text())
    ev = trace["traceEvents"]
    assert isinstance(ev, list) and ev
    for e in ev:
        assert {"ph", "pid", "tid"} <= e.keys(), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0 and e["name"] and e["cat"], e
    procs = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(p.startswith("main process") for p in procs)
    assert any(t.startswith("main loop") for t in threads)
    assert {"DataLoader worker 0", "DataLoader worker 1"} <= {p.split(" (")[0] for p in procs}
    steps = rec.timeline["steps"]["step"]
    names = {e["name"] for e in ev if e["ph"] == "X"}
    assert {f"ProfilerStep#{n}" for n in steps} <= names
    assert {"wait", "compute", "read", "decode", "augment", "collate"} <= names
    # Worker spans carry batch, sample index and bytes.
    read = next(e for e in ev if e["ph"] == "X" and e["name"] == "read")
    assert {"batch", "sample", "bytes"} <= read["args"].keys() and read["pid"] != trace_mod.MAIN_PID
    # Counter tracks for the sampled metrics.
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    assert {"CPU % (mean of cores)", "disk read MB/s", "RAM GB"} <= counters
    assert trace["otherData"]["detail"]["main_loop"] == f"all {len(steps)} steps"


def _check_nesting(ev: list[dict]) -> None:
    """Complete events on one thread must nest (Perfetto flags and mis-draws overlapping slices)."""
    by_thread: dict[tuple, list[tuple[int, int, str]]] = {}
    for e in ev:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for key, spans in by_thread.items():
        spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        stack: list[tuple[int, int, str]] = []
        for s in spans:
            while stack and stack[-1][1] <= s[0] and not (stack[-1][1] == s[0] == s[1]):
                stack.pop()
            if stack:
                assert s[1] <= stack[-1][1], f"{key}: {s} overlaps {stack[-1]} without nesting"
            stack.append(s)


def test_trace_spans_nest_and_steps_enclose_their_stages(runs):
    ev = _events(runs[2]["dir"])
    _check_nesting(ev)
    main = [e for e in ev if e["ph"] == "X" and e["pid"] == trace_mod.MAIN_PID and e["tid"] == trace_mod.MAIN_TID]
    steps = {e["args"]["step"]: e for e in main if e["name"].startswith("ProfilerStep#")}
    for e in main:
        if e["name"] in ("wait", "compute"):
            n = e["args"].get("step")
            if n is None:  # wait carries the batch; find its step
                n = next(k for k, s in steps.items() if s["args"]["batch"] == e["args"]["batch"])
            s = steps[n]
            assert s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
    # Every flow start has its end and vice versa.
    starts = {e["id"] for e in ev if e["ph"] == "s"}
    ends = {e["id"] for e in ev if e["ph"] == "f"}
    assert starts == ends and starts


def test_workers0_has_main_process_loading_lane(runs):
    rec = runs[0]["rec"]
    assert any(lane.startswith("main process") and "workers=0" in lane for lane in timeline_lanes(rec))
    ev = _events(runs[0]["dir"])
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads[(trace_mod.MAIN_PID, trace_mod.LOADER_TID)] == "loading (main process, workers=0)"
    reads = [e for e in ev if e["ph"] == "X" and e["name"] == "read"]
    assert reads and all((e["pid"], e["tid"]) == (trace_mod.MAIN_PID, trace_mod.LOADER_TID) for e in reads)
    assert not any(e["ph"] == "M" and e["args"].get("name", "").startswith("DataLoader worker") for e in ev)
    _check_nesting(ev)
    for name in REPORT_FILES:
        assert (runs[0]["dir"] / name).is_file()


def test_gpu_series_and_cuda_timing_are_drawn_from_the_record(runs, tmp_path):
    """The GPU paths need no GPU to render: they read samples.gpu and CUDA-event times from the record."""
    rec = copy.deepcopy(runs[2]["rec"])
    t = rec.samples["t_s"]
    rec.samples["gpu"] = {"index": 0, "name": "Test GPU", "t_s": t,
                          "util_percent": [50.0 + (i % 7) for i in range(len(t))],
                          "mem_used_bytes": [2e9] * len(t), "mem_total_bytes": int(16e9),
                          "pcie_rx_bytes_per_s": [1e8] * len(t), "pcie_tx_bytes_per_s": [1e7] * len(t)}
    rec.compute_device = {"type": "cuda", "index": 0, "name": "Test GPU", "timing": "cuda events"}
    files = write_reports(rec, tmp_path)
    assert len(files) == len(REPORT_FILES)
    with Image.open(tmp_path / "utilisation.png") as gpu_im, Image.open(runs[2]["dir"] / "utilisation.png") as cpu_im:
        assert gpu_im.size[1] > cpu_im.size[1]  # two more panels: GPU util/memory and PCIe
    ev = _events(tmp_path)
    assert {"GPU util %", "GPU memory GB", "PCIe MB/s"} <= {e["name"] for e in ev if e["ph"] == "C"}
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "compute device (CUDA events)" in threads
    _check_nesting(ev)
    page = (tmp_path / "report.html").read_text()
    assert "No GPU" not in page and "Test GPU" in page


def test_renderers_measure_nothing(runs, tmp_path):
    """Rendering works with torch, psutil and pynvml unimportable, and no render module imports them."""
    banned = {"torch", "psutil", "pynvml", "torchvision"}
    for name in ("__init__", "plots", "html", "trace"):
        tree = ast.parse((REPO / "profiler" / "render" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m.split(".")[0] in banned for m in mods), (name, mods)
    code = ("import sys\n"
            f"for m in {sorted(banned)!r}: sys.modules[m] = None\n"
            "from profiler.record import load\nfrom profiler.analysis import analyze\n"
            "from profiler.render import write_reports\n"
            f"print(len(write_reports(analyze(load({str(runs[2]['dir'] / 'run.json')!r})), {str(tmp_path)!r})))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str(len(REPORT_FILES))


# ---------------------------------------------------------------------------------------------------------------------
# Long runs: bounded size.
# ---------------------------------------------------------------------------------------------------------------------
TIME_KEYS = {"wait_start", "wait_end", "h2d_start", "h2d_end", "compute_end", "collate_start", "collate_end",
             "received", "read_start", "read_end", "decode_end", "augment_end"}


def replicate(rec: RunRecord, n_steps: int) -> RunRecord:
    """A long record: the real timeline and sampler series repeated end to end, shifted in time and numbering."""
    big = copy.deepcopy(rec)
    tl, s = rec.timeline, rec.samples
    st, bt, sp = tl["steps"], tl["batches"], tl["sample_spans"]
    n0 = len(st["step"])
    period = max(max(st["compute_end"]), max(bt["received"]), max(s["t_s"] or [0.0])) + 0.01
    n_batches = max(bt["batch"]) + 1
    reps = math.ceil(n_steps / n0)

    def rep(cols: dict, number_keys: dict[str, int]) -> dict[str, list]:
        out = {}
        for k, v in cols.items():
            a = np.asarray(v)
            if k in TIME_KEYS:
                parts = [a + j * period for j in range(reps)]
            elif k in number_keys:
                parts = [a + j * number_keys[k] for j in range(reps)]
            elif k == "measured":
                parts = [a if j == 0 else np.ones_like(a) for j in range(reps)]
            else:
                parts = [a] * reps
            out[k] = np.concatenate(parts).tolist()
        return out

    steps = {k: v[:n_steps] for k, v in rep(st, {"step": n0, "batch": n_batches}).items()}
    big.timeline = {"steps": steps, "batches": rep(bt, {"batch": n_batches}),
                    "sample_spans": rep(sp, {"batch": n_batches}), "time_unit": tl.get("time_unit")}
    big.samples = dict(s)
    big.samples["t_s"] = np.concatenate([np.asarray(s["t_s"]) + j * period for j in range(reps)]).tolist()
    for k in ("cpu_percent_per_core", "ram_used_bytes", "ram_available_bytes", "page_cache_bytes",
              "disk_read_bytes_per_s", "shm_used_bytes"):
        if s.get(k) is not None:
            big.samples[k] = list(s[k]) * reps
    procs = []
    for p in s.get("processes", []):
        q = dict(p, t_s=np.concatenate([np.asarray(p["t_s"]) + j * period for j in range(reps)]).tolist())
        for k in ("cpu_percent", "rss_bytes", "pss_bytes", "uss_bytes"):
            if p.get(k) is not None:
                q[k] = list(p[k]) * reps
        procs.append(q)
    big.samples["processes"] = procs
    m = np.asarray(steps["measured"], dtype=bool)
    end = float(steps["compute_end"][-1])
    big.window = dict(rec.window, end_s=end, seconds=end - rec.window["start_s"], steps=int(m.sum()),
                      samples=int(np.asarray(steps["samples"])[m].sum()))
    return big


def test_long_run_reports_stay_bounded(runs, tmp_path):
    n = 20_000
    replicate(runs[2]["rec"], n).save(tmp_path / "run.json")
    big = analyze(load(tmp_path / "run.json"))  # as `profiler report run.json` does
    assert len(big.timeline["steps"]["step"]) == n
    files = write_reports(big, tmp_path)
    assert sorted(p.name for p in files) == sorted(REPORT_FILES)
    page = (tmp_path / "report.html").read_text()
    trace_size = (tmp_path / "trace.json").stat().st_size
    assert trace_size < 20 * MiB and (tmp_path / "report.html").stat().st_size < 20 * MiB
    trace = json.loads((tmp_path / "trace.json").read_text())
    ev = trace["traceEvents"]
    assert len(ev) <= 200_000
    # Detail is windowed, and both files say so.
    detail = trace["otherData"]["detail"]
    assert f"of {n:,}" in detail["main_loop"] and "then every" in detail["workers"]
    assert f"of {n:,}" in page and "then every" in page
    steps_in_trace = {int(e["name"].split("#")[1]) for e in ev if e["ph"] == "X" and e["name"].startswith("Profiler")}
    assert 0 in steps_in_trace and max(steps_in_trace) >= n - 10  # start and end of the run both covered
    assert len(steps_in_trace) < n
    # Aggregates stay exact: they come from the analysis of every step, not from the windowed detail.
    assert big.stages["compute"]["count"] == big.window["steps"] > 19_000
    assert f"{big.stages['compute']['count']:,}" in page
    assert f"{big.stall['seconds']:.3f}" in page
    for name in ("timeline.png", "utilisation.png", "latency.png"):
        with Image.open(tmp_path / name) as im:
            assert im.size[0] >= 600
