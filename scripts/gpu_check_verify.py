"""Checks of scripts/gpu_check.sh: read one run's run.json (or measure H2D directly) and print one PASS/FAIL line.

    python scripts/gpu_check_verify.py stall RUN_DIR --sleep 0.2 --every 5
    python scripts/gpu_check_verify.py oom RUN_DIR
    python scripts/gpu_check_verify.py timing RUN_DIR NAME [--workers 0]
    python scripts/gpu_check_verify.py h2d
Exit status 0 for PASS, 1 for FAIL. Every field may be missing or null in a broken record: that is a FAIL line
with the reason, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

STALL_TOLERANCE = 0.10  # the planted stall must be measured within 10 %
# pinned H2D on any PCIe 3 x16 or better link reaches this (PCIe 3 x16 ~12 GB/s, Gen5 ~50, NVLink-C2C more)
PINNED_MIN_BYTES_PER_S = 5e9
H2D_BYTES = 256 * 2**20  # per copy: large enough that launch latency is < 1 % of the time


def get(d: Any, path: str) -> Any:
    """``d['a']['b']...`` for ``path`` 'a.b...', None where any level is missing or not a dict."""
    for key in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def num(v: Any, fmt: str = ".2f") -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "null"


def report(name: str, ok: bool, what: str) -> int:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {what}", flush=True)
    return 0 if ok else 1


def load(run_dir: str) -> dict | None:
    p = Path(run_dir) / "run.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def planted_seconds(d: dict, sleep: float, every: int) -> tuple[float | None, str]:
    """Planted stall over the measured steps: one sleep for each measured step whose batch k has k % every == 0."""
    steps = get(d, "timeline.steps")
    if isinstance(steps, dict) and isinstance(steps.get("batch"), list) and isinstance(steps.get("measured"), list):
        n = sum(1 for b, m in zip(steps["batch"], steps["measured"]) if m and isinstance(b, int) and b % every == 0)
        return n * sleep, f"{n} planted sleeps in the measured steps"
    window = get(d, "window.steps")
    if isinstance(window, int) and window > 0:
        return window / every * sleep, f"~{window}/{every} planted sleeps (no timeline: approximate)"
    return None, "neither timeline.steps nor window.steps in the record"


def check_stall(a: argparse.Namespace) -> int:
    d = load(a.run_dir)
    if d is None:
        return report("planted_stall", False, f"no readable run.json in {a.run_dir}")
    planted, how = planted_seconds(d, a.sleep, a.every)
    measured = get(d, "stall.seconds")
    timing = get(d, "compute_device.timing")
    if planted is None or not planted or not isinstance(measured, (int, float)):
        return report("planted_stall", False, f"stall.seconds {num(measured)}; {how}")
    err = (measured - planted) / planted
    ok = abs(err) <= STALL_TOLERANCE and timing == "cuda events"
    return report("planted_stall", ok, f"stall {num(measured, '.3f')} s vs planted {planted:.3f} s ({err:+.1%}; "
                                       f"{how}), timing {timing}, by_cause {get(d, 'stall.by_cause')}")


def check_oom(a: argparse.Namespace) -> int:
    d = load(a.run_dir)
    if d is None:
        return report("oom_record", False, f"no readable run.json in {a.run_dir}")
    verdict = get(d, "verdict.bottleneck")
    recs = get(d, "verdict.recommendations") or []
    ok = verdict == "memory" and d.get("partial") is True and len(recs) >= 1
    first = recs[0].get("action") if recs and isinstance(recs[0], dict) else (recs[0] if recs else None)
    return report("oom_record", ok, f"verdict {verdict}, partial {d.get('partial')}, {len(recs)} recommendation(s)"
                                    f"{'; first: ' + str(first) if first else ''}")


def check_timing(a: argparse.Namespace) -> int:
    d = load(a.run_dir)
    if d is None:
        return report(a.name, False, f"no readable run.json in {a.run_dir}")
    timing = get(d, "compute_device.timing")
    h2d, compute = get(d, "stages.h2d.mean_ms"), get(d, "stages.compute.mean_ms")
    ok = timing == "cuda events" and isinstance(h2d, (int, float)) and h2d > 0 and \
        isinstance(compute, (int, float)) and compute > 0
    workers = get(d, "job.loader.num_workers")
    if workers is None:
        workers = get(d, "config.workers")
    if a.workers is not None:
        ok = ok and workers == a.workers
    peak = get(d, "memory.device_peak_bytes")
    return report(a.name, ok, f"timing {timing}, h2d {num(h2d)} ms, compute {num(compute)} ms per step, "
                              f"{num(get(d, 'throughput.samples_per_s'), '.0f')} samples/s, stall "
                              f"{num(get(d, 'stall.fraction'), '.1%')}, verdict {get(d, 'verdict.bottleneck')}, "
                              f"workers {workers}, peak device memory "
                              f"{num(peak / 2**20 if isinstance(peak, (int, float)) else None, '.0f')} MiB, "
                              f"partial {d.get('partial')}")


def check_h2d(_a: argparse.Namespace) -> int:
    import torch

    if not torch.cuda.is_available():
        return report("h2d_bandwidth", False, "no CUDA device")
    n = H2D_BYTES // 4
    dev = torch.empty(n, device="cuda")
    rates = {}
    for kind, host in (("pinned", torch.ones(n).pin_memory()), ("pageable", torch.ones(n))):
        dev.copy_(host, non_blocking=True)  # warm-up (and first-touch of pageable pages)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            dev.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        rates[kind] = 5 * H2D_BYTES / (start.elapsed_time(end) / 1e3)
    ok = rates["pinned"] >= PINNED_MIN_BYTES_PER_S and rates["pinned"] > rates["pageable"]
    return report("h2d_bandwidth", ok, f"pinned {rates['pinned'] / 1e9:.1f} GB/s, pageable "
                                       f"{rates['pageable'] / 1e9:.1f} GB/s (pinned must be >= "
                                       f"{PINNED_MIN_BYTES_PER_S / 1e9:.0f} GB/s and above pageable)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="check", required=True)
    p = sub.add_parser("stall")
    p.add_argument("run_dir")
    p.add_argument("--sleep", type=float, required=True)
    p.add_argument("--every", type=int, required=True)
    p.set_defaults(fn=check_stall)
    p = sub.add_parser("oom")
    p.add_argument("run_dir")
    p.set_defaults(fn=check_oom)
    p = sub.add_parser("timing")
    p.add_argument("run_dir")
    p.add_argument("name")
    p.add_argument("--workers", type=int, default=None)
    p.set_defaults(fn=check_timing)
    p = sub.add_parser("h2d")
    p.set_defaults(fn=check_h2d)
    a = ap.parse_args(argv)
    try:
        return a.fn(a)
    except Exception as exc:  # a check that cannot be made is a FAIL line, not a traceback  # noqa: BLE001
        return report(getattr(a, "name", None) or a.check, False, f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
