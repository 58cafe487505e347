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
from typing import Any

import numpy as np
import pytest
from PIL import Image

from profiler.analysis import analyze
from profiler.config import RunConfig
from profiler.harness.data import make_sample_dataset
from profiler.harness.runner import execute, prepare
from profiler.record import RunRecord, load
from profiler.render import PLOT_FILES, REPORT_FILES, write_reports
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
    assert page.count('src="data:image/png;base64,') == len(PLOT_FILES)  # every plot of the registry, embedded
    # The compute device is the CPU here, and the page says so.
    assert "No GPU: the model ran on the CPU" in page
    # Recommendations with their numbers.
    text = htmllib.unescape(page)  # markupsafe writes ' as &#39;, html.escape as &#x27;: compare the text
    for r in rec.verdict["recommendations"]:
        assert r["action"] in text and r["expected_gain"] in text


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


def test_html_hides_secret_looking_values_whatever_their_key(runs):
    """A record made before argv was redacted at collection (or by hand): the page still hides the option's value,
    a URL password and a key-like value in an innocent field, and keeps ordinary paths and hashes."""
    rec = copy.deepcopy(runs[2]["rec"])
    rec.job = {"kind": "script", "target": "train.py", "then": "exit",
               "argv": ["--epochs", "3", "--wandb-key", "PLAINVALUE42", "--hf-token=hf_abcdefghijklmnopqrstuvwx",
                        "--data", "s3://me:PASSWORD99@bucket/imgs", "/data/snapshots/" + "3f2a" * 10]}
    rec.environment = dict(rec.environment, note="aB3" * 12)
    page = render_html(rec, {})
    for secret in ("PLAINVALUE42", "hf_abcdefghijklmnopqrstuvwx", "PASSWORD99", "aB3" * 12):
        assert secret not in page, secret
    assert "--wandb-key" in page and "s3://me:(hidden)@bucket/imgs" in page and "3f2a" * 10 in page


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
    assert {"wait", "compute", "sample", "read", "decode", "augment", "collate"} <= names
    # One slice per dataset call, carrying batch, sample index, thread accounting and bytes; its sub-stages inside it.
    sample = next(e for e in ev if e["ph"] == "X" and e["name"] == "sample")
    assert {"batch", "sample", "items", "cpu_ms", "runq_ms", "rchar", "read_bytes"} <= sample["args"].keys()
    assert sample["pid"] != trace_mod.MAIN_PID
    read = next(e for e in ev if e["ph"] == "X" and e["name"] == "read" and e["args"]["batch"] ==
                sample["args"]["batch"] and e["args"]["sample"] == sample["args"]["sample"])
    assert sample["ts"] <= read["ts"] and read["ts"] + read["dur"] <= sample["ts"] + sample["dur"]
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
    from profiler import render

    banned = {"torch", "psutil", "pynvml", "torchvision"}
    modules = sorted((REPO / "profiler" / "render").glob("*.py"))
    assert len(modules) >= 12
    for path in modules:
        name = path.stem
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m.split(".")[0] in banned for m in mods), (name, mods)
    # Every registry, from what its command hands it: a run, a comparison, a sweep, fit's result, the merged ranks.
    for k, w in enumerate((2, 0)):
        d = json.loads((runs[w]["dir"] / "run.json").read_text())
        d["distributed"] = {"rank": k, "world_size": 2, "boot_id": "b", "hostname": "h", "t0_monotonic_ns": 10**9,
                            "collectives": None, "backend": "gloo"}
        (tmp_path / "ranks" / f"rank{k}").mkdir(parents=True)
        (tmp_path / "ranks" / f"rank{k}" / "run.json").write_text(json.dumps(d))
    code = ("import sys\n"
            f"for m in {sorted(banned)!r}: sys.modules[m] = None\n"
            "from pathlib import Path\n"
            "from profiler.record import load\nfrom profiler.analysis import analyze\n"
            "from profiler.analysis.compare import compare\nfrom profiler.distributed.view import merged_view\n"
            "from profiler import render\n"
            f"out = Path({str(tmp_path)!r})\n"
            f"a, b = (analyze(load(p)) for p in ({str(runs[2]['dir'] / 'run.json')!r}, "
            f"{str(runs[0]['dir'] / 'run.json')!r}))\n"
            "print(len(render.write_reports(a, out)))\n"
            "print(len(render.write_compare(compare([a, b], names=['a', 'b']), out / 'compare')))\n"
            "pt = {'setting': {}, 'measured_samples_per_s': 10.0, 'interval': [9.0, 11.0], 'error': 0.1}\n"
            "doc = {'points': [dict(pt, index=i, label=f'workers={i}') for i in range(2)], 'baseline': 0}\n"
            "print(len(render.write_sweep(doc, out / 'sweep')))\n"
            "bd = {'model': 'm', 'mode': 'train', 'batch_size': 8, 'precision': 'fp32', 'amp': False,\n"
            "      'image_size': 224, 'weights_bytes': 2**30, 'total_bytes': 2**30}\n"
            "print(len(render.write_fit({'breakdown': bd, 'gpu_bytes': 2**33}, out / 'fit')))\n"
            "view, recs = merged_view(out / 'ranks')\n"
            "print(len(render.write_ranks(view, recs, out / 'ranks')))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [str(len(reg)) for reg in (REPORT_FILES, render.COMPARE, render.SWEEP, render.FIT,
                                                           render.RANKS)]
    assert "could not" not in r.stderr, r.stderr[-2000:]


# ---------------------------------------------------------------------------------------------------------------------
# Long runs: bounded size.
# ---------------------------------------------------------------------------------------------------------------------
TIME_KEYS = {"wait_start", "wait_end", "h2d_start", "h2d_end", "compute_end", "collate_start", "collate_end",
             "received", "sent", "read_start", "read_end", "decode_end", "augment_end", "start", "end", "iter_start",
             "iter_end", "first_batch"}


def replicate(rec: RunRecord, n_steps: int) -> RunRecord:
    """A long record: the real timeline and sampler series repeated end to end, shifted in time and numbering (the
    series then thinned as the sampler thins a long run's)."""
    from profiler.samplers.background import _SYSTEM_SERIES, PROCESS_SERIES_HOW
    from profiler.samplers.thinning import MAX_TICKS, fit_series, rows_to_points, to_points

    big = copy.deepcopy(rec)
    tl, s = rec.timeline, rec.samples
    st, bt, sp = tl["steps"], tl["batches"], tl["sample_spans"]
    n0 = len(st["step"])
    period = max(max(st["compute_end"]), max(bt["received"]), max(s["t_s"] or [0.0])) + 0.01
    n_batches = max(bt["batch"]) + 1
    reps = math.ceil(n_steps / n0)

    def rep(cols: dict, number_keys: dict[str, int]) -> dict[str, Any]:
        out = {}
        for k, v in cols.items():
            a = np.asarray(v)
            if k in TIME_KEYS:
                parts = [a + j * period for j in range(reps)]
            elif k in number_keys:
                parts = [a + j * number_keys[k] for j in range(reps)]
            elif isinstance(v, dict):  # v2 sample_spans.stages: seconds per row, repeated like the rows
                out[k] = rep(v, {})
                continue
            elif k == "measured":
                parts = [a if j == 0 else np.ones_like(a) for j in range(reps)]
            else:
                parts = [a] * reps
            out[k] = np.concatenate(parts).tolist()
        return out

    ep = tl.get("epochs") or {}
    n_epochs = len(ep.get("epoch", [])) or 1
    steps = {k: v[:n_steps] for k, v in rep(st, {"step": n0, "batch": n_batches, "epoch": n_epochs}).items()}
    big.timeline = {**tl, "steps": steps, "batches": rep(bt, {"batch": n_batches}),
                    "sample_spans": rep(sp, {"batch": n_batches}), "epochs": rep(ep, {"epoch": n_epochs})}
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
    # The sampler of a run this long halves its series (samplers/thinning.py): at most MAX_TICKS // 2 points each.
    if len(big.samples["t_s"]) > MAX_TICKS:
        keep = MAX_TICKS // 2
        for _, k, how in _SYSTEM_SERIES:
            big.samples[k] = to_points(big.samples[k], keep, how)
        big.samples["cpu_percent_per_core"] = rows_to_points(big.samples["cpu_percent_per_core"], keep)
        big.samples["processes"] = [fit_series(q, PROCESS_SERIES_HOW, keep) for q in procs]
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


# ---------------------------------------------------------------------------------------------------------------------
# The renderer seam.
# ---------------------------------------------------------------------------------------------------------------------
def test_report_files_come_from_the_registry():
    from profiler import render

    assert REPORT_FILES == tuple(r.file for r in render.REPORT)
    assert render.PLOT_FILES == tuple(f for f in REPORT_FILES if f.endswith(".png"))
    assert render.COMPARE_FILES == ("compare.png", "compare.html", "compare.json")
    assert render.SWEEP_FILES == ("sweep.json", "sweep.png", "sweep.html")
    assert render.RANKS_FILES == ("ranks.json", "ranks.png", "trace.json", "report.html")
    every = [r for reg in render.REGISTRIES for r in reg]
    assert len({r.name for r in every}) == len(every)
    assert all(render.renderer(r.name) is r for r in every)


def test_one_failing_renderer_costs_no_other(runs, tmp_path, capsys):
    from profiler import render

    broken = render.Renderer("utilisation", "utilisation.png", "plots:no_such_function")
    chain = tuple(broken if r.name == "utilisation" else r for r in render.REPORT)
    files = render.render_all(chain, runs[2]["rec"], tmp_path)
    assert sorted(p.name for p in files) == sorted(f for f in REPORT_FILES if f != "utilisation.png")
    err = capsys.readouterr().err
    assert "could not write utilisation.png" in err and "no_such_function" in err
    page = (tmp_path / "report.html").read_text()
    assert "This plot could not be drawn" in page and "no_such_function" in page
    assert page.count('src="data:image/png;base64,') == len(PLOT_FILES) - 1
    assert not list(tmp_path.glob("*.tmp")) + list(tmp_path.glob(".*.tmp"))


def test_html_module_needs_no_matplotlib():
    code = ("import sys\nimport profiler.render.html, profiler.render.compare_html, profiler.render.compare_terminal\n"
            "print('matplotlib' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------------------------------
# run.json v2: sample spans with named sub-stages (user stages too), epochs, stall by kind, the job section.
# ---------------------------------------------------------------------------------------------------------------------
def to_v2(rec: RunRecord) -> RunRecord:
    """A v2 record with what a user's job adds, derived by the real analysis: a v1 timeline migrated as
    docs/run_json.md defines it (a v2 one kept), a user stage ("tokenize", 0.3 of augment) and a rest of each span
    (getitem, 0.2 of augment), epochs when the harness wrote none, and a job section."""
    v2 = copy.deepcopy(rec)
    tl = v2.timeline
    sp = tl["sample_spans"]
    if "start" not in sp:  # v1 → v2
        rs, re_, de, ae = (np.asarray(sp[k], dtype=float) for k in ("read_start", "read_end", "decode_end",
                                                                     "augment_end"))
        n = rs.size
        sp = {"batch": sp["batch"], "worker": sp["worker"], "index": sp["index"], "items": [1] * n,
              "start": rs.tolist(), "end": ae.tolist(), "cpu": [0.0] * n, "runq": [0.0] * n, "rchar": [0] * n,
              "read_bytes": [0] * n, "stages": {"read": (re_ - rs).tolist(), "decode": (de - re_).tolist(),
                                                "augment": (ae - de).tolist()}}
        tl["sample_spans"] = sp
    aug = np.asarray(sp["stages"]["augment"], dtype=float)
    sp["stages"] = {**sp["stages"], "augment": (0.5 * aug).tolist(), "tokenize": (0.3 * aug).tolist()}
    st = tl["steps"]
    if not (tl.get("epochs") or {}).get("iter_start"):
        st["epoch"] = [0] * len(st["step"])
        t0 = max(0.0, float(min(sp["start"] + st["wait_start"])) - 0.01)
        tl["epochs"] = {"epoch": [0], "iter_start": [t0], "iter_end": [t0 + 0.004],
                        "first_batch": [float(min(tl["batches"]["received"]))]}
    v2.job = {"kind": "script", "target": "train_cls.py", "argv": ["train_cls.py", "--epochs", "1"], "then": "exit",
              "ended": "script ended",
              "loader": {"dataset_class": "ShardDataset", "created_at": "train_cls.py:42", "num_workers": 2,
                         "batch_size": 8, "pin_memory": False},
              "other_loaders": 1}
    return analyze(v2)


@pytest.fixture(scope="module")
def v2run(runs, tmp_path_factory):
    rec = to_v2(runs[2]["rec"])
    d = tmp_path_factory.mktemp("v2")
    return {"rec": rec, "dir": d, "files": write_reports(rec, d)}


def test_v2_record_renders_every_file(v2run, capsys):
    assert sorted(p.name for p in v2run["files"]) == sorted(REPORT_FILES)
    assert "could not" not in capsys.readouterr().err


def test_v2_latency_and_timeline_iterate_the_stages_present(v2run):
    from profiler.render import plots, spans

    rec = v2run["rec"]
    names = plots.latency_stages(rec)
    assert names[:6] == ["read", "decode", "augment", "getitem", "tokenize", "collate"]
    assert "ready_ahead" not in names
    # latency.png draws the analysis' histograms: every observation of the stage, on bins that hold them all.
    for k in ("tokenize", "getitem", "read", "collate", "wait"):
        hist = rec.stages[k]["histogram"]
        assert sum(hist["counts"]) + hist["zeros"] == rec.stages[k]["count"] > 0, k
        assert len(hist["edges_ms"]) == len(hist["counts"]) + 1
        assert hist["edges_ms"][-1] >= 10 * hist["edges_ms"][0] * (1 - 1e-5)
    # The worker lanes split each span proportionally: the pieces tile [start, end] exactly.
    sp = spans.sample_spans(rec.timeline)
    lay = sp.layout()
    assert [k for k, _, _ in lay] == ["read", "decode", "augment", "tokenize", "getitem"]
    for (_, _, e), (_, s, _) in zip(lay, lay[1:]):
        assert np.allclose(e, s)
    assert np.allclose(lay[0][1], sp.cols["start"]) and np.allclose(lay[-1][2], sp.cols["end"])
    with Image.open(v2run["dir"] / "latency.png") as im:
        assert im.size[1] > 800  # three rows of histograms: 10 stages


def test_v1_spans_read_as_their_v2_migration(runs, tmp_path, capsys):
    """A record saved before v2 (read_start/read_end/decode_end/augment_end) draws as the migration defines it."""
    from profiler.record.migrate import v2_timeline
    from profiler.render import spans

    v2 = spans.sample_spans(runs[2]["rec"].timeline)
    lay = {k: (s0, s1) for k, s0, s1 in v2.layout()}
    v1_cols = {"batch": v2.cols["batch"].tolist(), "worker": v2.cols["worker"].tolist(),
               "index": v2.cols["index"].tolist(), "read_start": v2.cols["start"].tolist(),
               "read_end": lay["read"][1].tolist(), "decode_end": lay["decode"][1].tolist(),
               "augment_end": v2.cols["end"].tolist()}
    v1 = spans.sample_spans({"sample_spans": v1_cols})
    assert v1.stage_names() == ["read", "decode", "augment"]
    assert np.allclose(v1.cols["start"], v2.cols["start"]) and np.allclose(v1.cols["end"], v2.cols["end"])
    for k in ("read", "decode"):
        assert np.allclose(v1.stages[k], v2.stages[k]), k
    # augment takes the rest of the span in v1 (no getitem): what v2 splits into augment + getitem.
    assert np.allclose(v1.stages["augment"], lay["augment"][1] - lay["augment"][0] + v2.getitem())
    assert np.allclose(v1.getitem(), 0.0, atol=1e-9) and np.all(v1.cols["items"] == 1)
    tl1 = v2_timeline({**runs[2]["rec"].timeline, "sample_spans": v1_cols})
    assert {"start", "end", "stages"} <= tl1["sample_spans"].keys()
    old = copy.deepcopy(runs[2]["rec"])
    old.timeline = {**old.timeline, "sample_spans": v1_cols}
    assert sorted(p.name for p in write_reports(old, tmp_path)) == sorted(REPORT_FILES)
    assert "could not" not in capsys.readouterr().err
    assert {"read", "decode", "augment"} <= {e["name"] for e in _events(tmp_path) if e["ph"] == "X"}


def test_v2_trace_nests_user_stages_in_samples_and_draws_epochs(v2run):
    ev = _events(v2run["dir"])
    _check_nesting(ev)
    x = [e for e in ev if e["ph"] == "X"]
    tok = [e for e in x if e["name"] == "tokenize"]
    assert tok and all(e["pid"] >= trace_mod.WORKER_PID_BASE for e in tok)
    samples = [e for e in x if e["name"] == "sample"]
    assert all(any(s["ts"] <= t["ts"] and t["ts"] + t["dur"] <= s["ts"] + s["dur"] and s["tid"] == t["tid"]
                   for s in samples) for t in tok[:50])
    assert any(s["args"]["cpu_ms"] > 0 for s in samples) and any(s["args"]["rchar"] > 0 for s in samples)
    epochs = [e for e in x if (e["pid"], e["tid"]) == (trace_mod.MAIN_PID, trace_mod.EPOCH_TID)]
    assert {"epoch 0", "epoch start", "iter(loader)"} <= {e["name"] for e in epochs}
    threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(t.startswith("epochs") for t in threads)


def test_v2_html_shows_user_stages_kinds_and_the_job(v2run):
    page = htmllib.unescape((v2run["dir"] / "report.html").read_text())
    rec = v2run["rec"]
    # Stage table: the registry's sample stages, the user's stage, then the batch and step stages.
    order = [page.index(f">{lab}<") for lab in ("read (open + read bytes)", "decode (bytes → image)",
                                                  "augment (transforms)", "your __getitem__ (rest)", "tokenize",
                                                  "collate", "wait for batch (main)")]
    assert order == sorted(order)
    assert ">tokenize<" in page and f"{rec.stages['tokenize']['total_s']:.3f}" in page
    assert "waiting for a core" in page and "blocked while reading from the block device" in page
    for fact in ("ShardDataset", "train_cls.py:42", "script ended", "job.loader.dataset_class"):
        assert fact in page, fact


# ---------------------------------------------------------------------------------------------------------------------
# Hostile text: rich markup, escape sequences and non-UTF-8 names in user strings.
# ---------------------------------------------------------------------------------------------------------------------
HOSTILE = ["/data/[/]weird [bold]x[/bold].jpg", "/data/\x1b[31mred\x1b[0m\x07.jpg",
           "/data/" + b"caf\xe9-\xff.jpg".decode("utf-8", "surrogateescape")]


def _hostile(rec: RunRecord) -> RunRecord:
    rec = copy.deepcopy(rec)
    rec.skipped = {"count": 3, "files": [{"path": p, "reason": f"cannot identify image file {p!s}"} for p in HOSTILE]}
    rec.config = dict(rec.config, data="/mnt/[/]in\x1b]0;pwned\x07put", out="/tmp/[red]out[/]")
    rec.dataset = dict(rec.dataset, root=HOSTILE[2])
    rec.findings = list(rec.findings) + [{"kind": "skipped", "message": f"skipped {HOSTILE[1]} and {HOSTILE[0]}"}]
    # A user-named stage whose name matplotlib would read as mathtext, and one with markup in it.
    odd = {"we$ird\\x$": 0.0, "[b]tok[/]": 0.0}
    rec.stall = dict(rec.stall, by_stage={**rec.stall["by_stage"], **odd})
    rec.stages = {**rec.stages, **{k: dict(rec.stages["read"], count=0) for k in odd}}
    return rec


def test_hostile_strings_render_in_the_terminal(runs):
    from io import StringIO

    from rich.console import Console

    from profiler.render.terminal import print_report

    buf = StringIO()
    for details in (False, True):  # the short view and every table
        print_report(_hostile(runs[2]["rec"]), Console(file=buf, width=200, force_terminal=False, color_system=None),
                     out_files=["/tmp/[/]out/report.html"], details=details)
    text = buf.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "[/]weird [bold]x[/bold].jpg" in text  # shown as written, neither styled nor an error
    assert "\\x1b[31mred" in text
    assert "/tmp/[/]out/report.html" in text and "[b]tok[/]" in text
    text.encode("utf-8")  # no lone surrogate left: any UTF-8 terminal can print it


def test_hostile_strings_render_in_html_and_trace(runs, tmp_path, capsys):
    rec = _hostile(runs[2]["rec"])
    files = write_reports(rec, tmp_path)
    assert sorted(p.name for p in files) == sorted(REPORT_FILES)
    assert "could not" not in capsys.readouterr().err
    raw = (tmp_path / "report.html").read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw
    page = raw.decode("utf-8")  # valid UTF-8 throughout
    assert "caf\\xe9-\\xff.jpg" in page and "\\x1b[31mred" in page
    assert "/data/[/]weird [bold]x[/bold].jpg" in page
    assert "<bold>" not in page and "[b]tok[/]" in page and "we$ird" in page
    trace = (tmp_path / "trace.json").read_bytes()
    assert b"\x1b" not in trace
    json.loads(trace)
    assert not list(tmp_path.glob("*.tmp")) + list(tmp_path.glob(".*.tmp"))


def test_live_progress_redraws_from_the_loop_and_starts_no_thread() -> None:
    """The live bar adds each step to counters and redraws from the job's own loop at most every PROGRESS_REDRAW_S:
    no refresh thread taking the GIL from the job, and the final counts are drawn on exit."""
    import io
    import threading

    from rich.console import Console

    from profiler.render.terminal import LiveProgress

    out = io.StringIO()
    before = threading.active_count()
    with LiveProgress(50, console=Console(file=out, force_terminal=True, width=120)) as live:
        assert threading.active_count() == before
        for k in range(50):
            t = 1_000_000 * k
            live.on_step(k >= 10, t, t + 250_000, 8)
        assert threading.active_count() == before
    text = out.getvalue()
    assert "50/50" in text and "measuring" in text
    assert text.count("warm-up") <= 2  # drawn once at the start (a tight loop of 50 steps is within one redraw)


# ---------------------------------------------------------------------------------------------------------------------
# The answer first (issue 34): headline, key figures, the short terminal view and --details.
# ---------------------------------------------------------------------------------------------------------------------
def _term(rec: RunRecord, width: int, details: bool) -> str:
    from io import StringIO

    from rich.console import Console

    from profiler.render.terminal import print_report

    buf = StringIO()
    print_report(rec, Console(file=buf, width=width, force_terminal=False, color_system=None),
                 out_files=["/tmp/out/run.json", "/tmp/a/rather/long/folder/name/for/the/reports/report.html"],
                 details=details)
    return buf.getvalue()


def _display_lines(text: str, width: int) -> int:
    """Lines a terminal of ``width`` columns shows (a line longer than the width takes several)."""
    return sum(max(1, math.ceil(len(ln) / width)) for ln in text.splitlines())


@pytest.mark.parametrize("workers", [2, 0])
def test_terminal_short_view_fits_one_screen_and_breaks_no_word(runs, workers):
    rec = runs[workers]["rec"]
    short = _term(rec, 80, False)
    assert _display_lines(short, 80) <= 45, short
    assert "┏" not in short  # no table: one stage line, one idle line
    from profiler.analysis.headline import headline

    assert short.splitlines()[0].startswith(headline(rec)[:40])
    assert "report.html" in short and "--details" in short
    for view in (False, True):  # nothing wraps mid-word at 80 columns: every word is one of the wide output's
        narrow, wide = _term(rec, 80, view), _term(rec, 2000, view)
        assert set(re.findall(r"\w+", narrow)) <= set(re.findall(r"\w+", wide)), \
            set(re.findall(r"\w+", narrow)) - set(re.findall(r"\w+", wide))
        assert max(len(ln) for ln in narrow.splitlines()) <= 80
    # A wide terminal uses its width: the headline stays on one line.
    assert _term(rec, 200, False).splitlines()[0].strip() == headline(rec)


def test_terminal_details_hold_every_table(runs):
    rec = runs[2]["rec"]
    text = _term(rec, 80, True)
    for title in ("Stages (measured window", "Idle compute device by cause", "What would help",
                  "Predicted from this run", "setting", "then bound by"):
        assert title in text, title
    flat = " ".join(_term(rec, 4000, True).split())
    for r in rec.verdict.get("recommendations") or []:
        assert " ".join(r["action"].split()) in flat and " ".join(r["expected_gain"].split()) in flat
    for f in rec.findings:
        assert " ".join(str(f["message"]).split()) in flat
    from profiler.render.whatif_rows import table_rows

    _, notes, _ = table_rows(rec)
    assert sum(len(n["settings"]) for n in notes) == len(rec.whatif["predictions"])
    for n in notes:  # every assumption, said once, with the settings it is for
        assert flat.count(" ".join(f"[{n['n']}] {', '.join(n['settings'])}: {n['text']}.".split())) == 1
    assert _display_lines(text, 80) > _display_lines(_term(rec, 80, False), 80)


def test_whatif_bound_labels_are_short_and_the_long_words_said_once(runs):
    from profiler.analysis.whatif import BINDS_LABEL_MAX, binds_label
    from profiler.render.whatif_rows import table_rows

    rec = runs[2]["rec"]
    rows, notes, bounds = table_rows(rec)
    assert rows and all(len(r["label"]) <= BINDS_LABEL_MAX for r in rows)
    assert len(binds_label("x" * 80)) == BINDS_LABEL_MAX
    assert sum(len(n["settings"]) for n in notes) == len(rows) and len(notes) < len(rows)
    assert len({b["label"] for b in bounds}) == len(bounds)
    page = htmllib.unescape((runs[2]["dir"] / "report.html").read_text())
    table = page[page.index('<table class="whatif">'):]
    table = table[:table.index("</table>")]
    for p in rec.whatif["predictions"]:
        assert p["assumption"] not in table and (p.get("binds_words") or "#") not in table
    notes_html = page[page.index('id="whatif-notes"'):]
    for n in notes:
        assert notes_html.count(f"<b>{', '.join(n['settings'])}</b>: {n['text']}.") == 1


def _with(rec: RunRecord, **sections: Any) -> RunRecord:
    rec = copy.deepcopy(rec)
    for k, v in sections.items():
        setattr(rec, k, v)
    return rec


def test_headline_is_short_and_names_verdict_share_and_cause(runs):
    from profiler.analysis.headline import HEADLINE_WORDS_MAX, headline, key_figures

    base = runs[2]["rec"]
    stall = dict(base.stall, fraction=0.41, seconds=2.0,
                 by_stage={"read": 0.1, "decode": 1.5, "augment": 0.3, "other": 0.1},
                 by_kind={"on_cpu": 1.7, "runqueue": 0.1, "blocked_device": 0.1, "other": 0.1})
    crowded = dict(stall, by_kind={"on_cpu": 0.5, "runqueue": 1.3, "blocked_device": 0.1, "other": 0.1})
    gpu = {"type": "cuda", "name": "NVIDIA H100", "index": 0, "timing": "cuda events"}
    cases = {
        "input": _with(base, stall=stall, compute_device=gpu,
                       verdict={"bottleneck": "cpu", "severity": "highly input-bound"}),
        "input_cpu": _with(base, stall=stall, verdict={"bottleneck": "cpu", "severity": "moderately input-bound"}),
        "crowded": _with(base, stall=crowded, verdict={"bottleneck": "cpu", "severity": "highly input-bound"}),
        "compute": _with(base, compute_device=gpu, verdict={"bottleneck": "compute", "severity": "not input-bound"}),
        "shared": _with(base, verdict={"bottleneck": "compute", "severity": "not input-bound",
                                       "binds": "cores: the model and 2 workers share 2 cores"}),
        "memory": _with(base, verdict={"bottleneck": "memory", "severity": "does not fit"}),
        "none": _with(base, verdict={"bottleneck": "none"}, window=dict(base.window, steps=0)),
    }
    words = {k: headline(r) for k, r in cases.items()}
    for k, h in words.items():
        assert len(h.split()) <= HEADLINE_WORDS_MAX, (k, h)
    assert words["input"] == "Input-bound: the GPU waited 41 % of the time, mostly for decoding in 2 workers."
    assert words["input_cpu"].startswith("Moderately input-bound: the model (CPU) waited 41 %")
    assert words["crowded"].endswith("mostly for a free core (2 workers oversubscribed).")
    assert "the GPU waited only" in words["compute"] and "GPU" not in words["shared"]
    assert "shared cores" in words["shared"] and "2 workers" in words["shared"]
    assert words["memory"].startswith("Does not fit") and words["none"].startswith("No verdict")
    for r in (base, runs[0]["rec"]):
        figs = key_figures(r)
        assert 3 <= len(figs) <= 5
        for f in figs:
            assert f.value.strip() not in ("none", "None", "?", "") and "none" not in f.value.split()
    assert key_figures(runs[2]["rec"])[2].value == "2 × 8" and key_figures(runs[0]["rec"])[2].value == "0 × 8"


def test_batch_size_card_of_a_batch_sampler_loader(runs):
    """A loader with a batch sampler has DataLoader.batch_size None: the card says the samples per step."""
    from profiler.analysis.headline import key_figures

    rec = runs[2]["rec"]
    job = {"kind": "script", "target": "train.py", "loader": {"num_workers": 3, "batch_size": None}}
    tp = dict(rec.throughput, steps=10, samples=320)
    assert key_figures(_with(rec, job=job, throughput=tp))[2].value == "3 × 32"
    assert key_figures(_with(rec, job=job, throughput=dict(tp, samples=315)))[2].value == "3 × ≈ 31.5"
    builtin = {"kind": "builtin", "loader": {"num_workers": 2, "batch_size": None}}
    assert key_figures(_with(rec, job=builtin, config=dict(rec.config, batch_size=32)))[2].value == "2 × 32"


def test_other_pages_headlines_answer_first():
    """ranks: which rank straggles and why (or none); sweep: the best setting against the first point; compare with
    3 runs: the fastest. Each at most ~20 words."""
    from profiler.analysis.headline import HEADLINE_WORDS_MAX, compare_headline, ranks_headline, sweep_headline

    base = {"present": [0, 1, 2, 3], "skew_ms": {"mean": 3.2}, "slow_hosts": [], "stragglers": []}
    io = dict(base, stragglers=[{"rank": 2, "kind": "input", "cause": "io", "waiting_share": 0.31}])
    comp = dict(base, stragglers=[{"rank": 1, "kind": "compute", "compute_ms": 120.0, "others_compute_ms": 80.0,
                                   "waiting_share": 0.2}])
    host = dict(base, slow_hosts=[{"hostname": "n2", "ranks": [2, 3], "causes": ["cpu"]}], stragglers=io["stragglers"])
    words = [ranks_headline(v) for v in (base, io, comp, host)]
    assert words[0].startswith("No straggler: the 4 ranks keep pace")
    assert words[1] == "Rank 2 straggles, input-bound on storage reads: the others waited 31 % of each step for it."
    assert words[2].startswith("Rank 1 straggles, slowest to compute (120 vs 80 ms)")
    assert words[3].startswith("Host n2 is slow as a whole")
    sweep = {"baseline": 0, "best": {"label": "workers=4", "samples_per_s": 300.0}, "median_abs_error": 0.12,
             "points": [{"index": 0, "label": "workers=1", "measured_samples_per_s": 100.0},
                        {"index": 1, "label": "workers=4", "measured_samples_per_s": 300.0}]}
    words.append(sweep_headline(sweep))
    assert words[-1] == ("Best setting: workers=4, 300 samples/s, 3.00x workers=1; predictions from the first point "
                         "were off by 12 % (median).")
    assert sweep_headline({"points": [], "best": None}).startswith("No point")
    three = {"labels": ["A", "B", "C"], "sentences": {}, "metrics": [{"key": "throughput", "values": [100, 90, 250]}]}
    words.append(compare_headline(three))
    assert words[-1] == "C is the fastest of 3 runs: 250 samples/s, 2.50x A."
    three["config_diffs"] = {"B": [], "C": [{"text": "workers 0 → 4"}]}  # what was changed to get there
    words.append(compare_headline(three))
    assert words[-1] == "C is the fastest of 3 runs: 250 samples/s, 2.50x A (workers 0 → 4)."
    two = {"labels": ["A", "B"], "sentences": {"B": "B is 2.0x faster (100 → 200 samples/s); the wait fell by 1 s, "
                                                     "mostly decoding. Differences: workers 2 → 4."}}
    words.append(compare_headline(two))
    assert words[-1] == "B is 2.0x faster (100 → 200 samples/s); the wait fell by 1 s, mostly decoding."
    assert all(len(w.split()) <= HEADLINE_WORDS_MAX for w in words), words
