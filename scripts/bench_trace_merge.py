"""Trace merge at scale (issue 33 item 5): a 10,000-step, 8-worker record merged into a kineto trace of those steps.

Usage: python scripts/bench_trace_merge.py [STEPS] [WORKERS] [OPS_PER_STEP]   (default 10000 8 12)

The record is tests/_records.py's simulation scaled up (STEPS steps, WORKERS workers, 4 samples a batch with read /
decode / augment, collate), analyzed first (not timed: the analysis is the run's, not the merge's). The kineto trace
is made to look like a CPU torch.profiler trace of the same steps: a ``ProfilerStep#N`` per step on the main thread
enclosing the DataLoader's ``__next__`` span and OPS_PER_STEP aten ops, on a CLOCK_REALTIME base. Timed: reading the
trace file, ``kineto_merge.merge``, serialising and writing the merged file. Prints the sizes against the bound
(merged <= 2 x job trace + our own trace.json) and, last, ``merge_seconds: <s>`` (wall seconds; goal: a few seconds
on 2 idle cores).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

BASE_NS = 1_790_857_026_000_000_000
T0_MONO_NS = 2_000_000_000_000
OFFSET_US = 1_796_517_746_837_838  # CLOCK_REALTIME - CLOCK_MONOTONIC, µs


def make_record(steps: int, workers: int):  # type: ignore[no-untyped-def]
    import _records

    from profiler.analysis import analyze
    from profiler.record import RunRecord

    _records.WORKERS, _records.STEPS = workers, steps
    d = _records.record_v2()
    d["torch_traces"] = {"traces": [], "clock": {"ours": "CLOCK_MONOTONIC", "theirs": "CLOCK_REALTIME",
                                                 "t0_monotonic_ns": T0_MONO_NS,
                                                 "realtime_minus_monotonic_us": OFFSET_US, "drift_ns": 0,
                                                 "read_bracket_ns": 100}}
    rec = RunRecord.from_dict(d)
    analyze(rec)
    return rec


def make_kineto(rec, ops: int) -> dict:  # type: ignore[no-untyped-def]
    """A CPU kineto trace of the record's steps: ProfilerStep#N from one step's compute end to the next's."""
    st = rec.timeline["steps"]
    shift = (T0_MONO_NS + OFFSET_US * 1000 - BASE_NS) / 1e3
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 4000, "tid": 0, "args": {"name": "python"}}]
    pid = tid = 4000
    n = len(st["wait_start"])
    for i in range(n):
        a = st["wait_start"][i] * 1e6 + shift - 20.0
        b = (st["wait_start"][i + 1] if i + 1 < n else st["compute_end"][i]) * 1e6 + shift - 20.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": pid, "tid": tid,
                   "ts": round(a, 3), "dur": round(b - a, 3), "args": {"External id": 3 * i}})
        ws, we = st["wait_start"][i] * 1e6 + shift, st["wait_end"][i] * 1e6 + shift
        m = min(2.0, (we - ws) / 4)  # torch's __next__ inside our wait for it (ours wraps it from outside)
        ev.append({"ph": "X", "cat": "user_annotation", "pid": pid, "tid": tid, "ts": round(ws + m, 3),
                   "dur": round(max(0.0, we - ws - 2 * m), 3),
                   "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"})
        c0, c1 = we + 5, max(we + 6, b - 5)
        step = (c1 - c0) / ops
        for k in range(ops):
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid,
                       "ts": round(c0 + k * step, 3), "dur": round(step * 0.8, 3),
                       "args": {"External id": 3 * i + 1, "Sequence number": i * ops + k, "Fwd thread id": 0,
                                "Record function id": 0, "Ev Idx": i * ops + k}})
            if k % 4 == 0:
                ev.append({"ph": "s", "id": i * ops + k, "pid": pid, "tid": tid, "ts": round(c0 + k * step, 3),
                           "cat": "fwdbwd", "name": "fwdbwd"})
                ev.append({"ph": "f", "id": i * ops + k, "pid": pid, "tid": tid, "ts": round(c0 + k * step, 3),
                           "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"})
    return {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_NS,
            "traceEvents": ev, "traceName": "bench"}


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    ops = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    from profiler.render import kineto_merge
    from profiler.render import trace as trace_mod

    t = time.perf_counter()
    rec = make_record(steps, workers)
    print(f"record: {steps:,} steps, {workers} workers, made and analyzed in {time.perf_counter() - t:.1f} s")
    with tempfile.TemporaryDirectory() as d:
        job = Path(d) / "job.pt.trace.json"
        job.write_text(json.dumps(make_kineto(rec, ops), indent=1))  # kineto writes one event a line
        ours = Path(d) / "trace.json"
        trace_mod.write_trace(rec, ours)
        t, cpu = time.perf_counter(), time.process_time()
        merged = kineto_merge.merge(rec, kineto_merge.read_trace(job))
        t_merge = time.perf_counter() - t
        out = Path(d) / "merged.json"
        from profiler.render.output import write_atomic

        write_atomic(out, kineto_merge.dumps(merged))
        total, total_cpu = time.perf_counter() - t, time.process_time() - cpu
        facts = merged["otherData"]["profiler_merge"]
        jb, ob, mb = job.stat().st_size, ours.stat().st_size, out.stat().st_size
        print(f"job trace {jb / 1e6:.1f} MB, our trace.json {ob / 1e6:.1f} MB, merged {mb / 1e6:.1f} MB "
              f"(bound 2 x job + ours = {(2 * jb + ob) / 1e6:.1f} MB: {'within' if mb <= 2 * jb + ob else 'OVER'})")
        print(f"events: merged {len(merged['traceEvents']):,}; steps added {facts['steps_added']:,}, waits inside a "
              f"ProfilerStep {facts['waits_inside_profiler_step']:,} of {facts['waits_checked']:,}; kineto's "
              f"next() spans inside a wait {facts['dataloader_next_inside_wait']:,} of "
              f"{facts['dataloader_next_checked']:,}")
        print(f"read + merge: {t_merge:.2f} s; + serialise and write: {total - t_merge:.2f} s (wall); "
              f"{total_cpu:.2f} s on the CPU (the wall time on a loaded machine is mostly waiting for a core)")
        print(f"merge_seconds: {total:.2f}")


if __name__ == "__main__":
    main()
