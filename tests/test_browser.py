"""report.html in a real browser (headless Chromium): it renders, shows the verdict, logs no console messages and
requests nothing from the network. Skipped only where Chromium is not installed (.ci/run installs it)."""
from __future__ import annotations

import html as htmllib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from profiler.analysis import analyze
from profiler.config import RunConfig
from profiler.harness.data import make_sample_dataset
from profiler.harness.runner import execute, prepare
from profiler.render import write_reports

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
TIMEOUT_S = 90


def chromium(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run with a fresh profile; background services off so the net log shows the page's own
    requests (the rest are filtered by their file:// site below anyway)."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
           "--disable-default-apps", f"--user-data-dir={profile}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)


def load_page(path: Path, tmp: Path) -> tuple[str, list[str], list[str]]:
    """(DOM after load, console lines, non-file URLs the page requested)."""
    netlog = tmp / f"net-{path.stem}.json"
    r = chromium(path.as_uri(), tmp, "--dump-dom", "--enable-logging=stderr", "--v=0", f"--log-net-log={netlog}")
    assert r.returncode == 0, r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    requested: list[str] = []
    if netlog.exists():
        log = json.loads(netlog.read_text())
        start = log["constants"]["logEventTypes"].get("URL_REQUEST_START_JOB")
        for e in log.get("events", []):
            p = e.get("params") or {}
            # Requests the page made carry its site (file://); the browser's own background fetches do not.
            if e.get("type") == start and "file://" in str(p.get("site_for_cookies", "")):
                if not str(p.get("url", "")).startswith(("file:", "data:")):
                    requested.append(p["url"])
    return r.stdout, console, requested


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("browser")
    data = make_sample_dataset(root / "data", count=32, size=(160, 120))
    c = RunConfig(data=str(data), steps=4, warmup=1, workers=1, batch_size=8, model="tiny", image_size=64)
    rec = analyze(execute(prepare(c)))
    write_reports(rec, root / "out")
    return root / "out" / "report.html", rec


def test_detector_sees_console_errors_and_network_loads(tmp_path):
    """Control: the checks below can fail. A page with a script error and a remote image is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><p>x</p><script>console.error("boom"); throw new Error("kaboom")'
                   '</script><img src="http://example.invalid/x.png"></body></html>')
    _, console, requested = load_page(bad, tmp_path)
    assert any("kaboom" in ln for ln in console) and any("boom" in ln for ln in console)
    assert any("example.invalid" in u for u in requested)


def test_report_renders_with_verdict_no_console_errors_no_network(report, tmp_path):
    page, rec = report
    dom, console, requested = load_page(page, tmp_path)
    assert rec.verdict["summary"] in htmllib.unescape(dom)
    assert 'id="verdict"' in dom and dom.count("data:image/png;base64,") >= 4
    assert console == [], console
    assert requested == [], requested


def test_report_screenshot_is_a_real_page(report, tmp_path):
    page, _ = report
    shot = tmp_path / "shot.png"
    # 4,000 px: the verdict, recommendations and the what-would-help tables come before the first plot
    r = chromium(page.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1280,4000")
    assert r.returncode == 0, r.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.format == "PNG" and im.size == (1280, 4000)
        rgb = np.asarray(im.convert("RGB"), dtype=np.int16)
    non_white = (rgb.min(axis=2) < 235).mean()
    assert non_white > 0.05, f"screenshot is nearly blank ({non_white:.1%} non-white)"
    # The plots (colorful) are on screen, not just text: a good share of saturated pixels.
    saturation = rgb.max(axis=2) - rgb.min(axis=2)
    assert (saturation > 60).mean() > 0.02
