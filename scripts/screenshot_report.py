"""Regenerate docs/img/report_first_screen.png: the first screen (1366x768) of report.html from a real run.

Why a script: the README shows what a user sees first, so the picture must come from the tool as it is, not be
drawn by hand; rerun this after a change to the report's top. It runs ``python -m profiler run`` on the built-in
pipeline (or ``--run-json`` re-renders a saved run), then headless Chromium takes the screenshot at the size of a
common laptop screen, and Pillow squeezes it under --max-kb (a palette PNG: the page is mostly flat colors).

    python scripts/screenshot_report.py                     # 30 measured steps of the built-in pipeline
    python scripts/screenshot_report.py --steps 60 --out docs/img/report_first_screen.png
    python scripts/screenshot_report.py --run-json reports/<run>/run.json

Needs Chromium (``apt-get install -y chromium``); prints ``name: value`` lines last (size, where).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WINDOW = (1366, 768)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        sys.exit("screenshot_report: Chromium is not installed (apt-get install -y chromium)")
    return found


def make_report(args: argparse.Namespace, tmp: Path) -> Path:
    """report.html of a fresh built-in run (or of --run-json, re-rendered) in ``tmp``."""
    out = tmp / "run"
    if args.run_json:
        cmd = [sys.executable, "-m", "profiler", "report", str(args.run_json), "--out", str(out)]
    else:
        cmd = [sys.executable, "-m", "profiler", "run", "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--no-progress", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"screenshot_report: {' '.join(cmd[2:])} failed:\n{r.stderr[-3000:]}")
    print(r.stdout)
    return out / "report.html"


def screenshot(page: Path, png: Path, tmp: Path) -> None:
    cmd = [chromium(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
           f"--screenshot={png}", page.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not png.is_file():
        sys.exit(f"screenshot_report: Chromium failed:\n{r.stderr[-3000:]}")


def shrink(src: Path, dst: Path, max_kb: int) -> int:
    """Write ``src`` to ``dst`` as a palette PNG (fewer colors until it fits ``max_kb``); returns its size."""
    from PIL import Image

    dst.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(src) as im:
        rgb = im.convert("RGB")
        for colors in (256, 128, 64, 32):
            rgb.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
                dst, optimize=True)
            if dst.stat().st_size <= max_kb * 1024:
                break
    return dst.stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="measured steps of the built-in run (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps (default 5)")
    ap.add_argument("--run-json", type=Path, help="re-render this saved run instead of running")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "report_first_screen.png")
    ap.add_argument("--max-kb", type=int, default=300, help="size limit of the PNG (default 300 KB)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="screenshot_report-") as d:
        tmp = Path(d)
        page = make_report(args, tmp)
        raw = tmp / "raw.png"
        screenshot(page, raw, tmp)
        size = shrink(raw, args.out, args.max_kb)
    print(f"screenshot: {args.out}")
    print(f"screenshot_kb: {size / 1024:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
