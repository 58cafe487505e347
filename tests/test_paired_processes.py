"""The benches' paired processes (scripts/paired_processes.py): in *slices* the twins take turns, whole steps each.

The benches' figures rest on this: two children pinned to one CPU, each measuring its own steps over one interval. In
slices a child runs SLICE_S of steps, hands the baton over and waits; the test reads both children's step times back
and checks that their steps interleave in runs of about a slice, not in the scheduler's few-ms slices (shared).
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import paired_processes  # noqa: E402

CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {scripts!r})
    from paired_processes import Interval, child_args, report

    role, start_at, stop_at = child_args(sys.argv)
    iv, n, times = Interval(), 0, []
    while not iv.done:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.001:  # a 1-ms step of CPU
            pass
        n += 1
        if iv.started:
            times.append(time.time())
        iv.step(n, start_at, stop_at)
    with open({out!r} + "/" + role + ".json", "w") as f:
        json.dump(times, f)
    report(iv)
""")


def _switches(out: Path) -> tuple[int, int, int]:
    """(steps of a, steps of b, how often the merged timeline of their steps changes hands)."""
    a, b = (json.loads((out / f"{r}.json").read_text()) for r in ("a", "b"))
    merged = sorted([(t, "a") for t in a] + [(t, "b") for t in b])
    return len(a), len(b), sum(1 for x, y in zip(merged, merged[1:]) if x[1] != y[1])


@pytest.mark.parametrize("slice_s", [0.1, 0.0])
def test_slices_take_turns_and_shared_do_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_s: float) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(scripts=str(SCRIPTS), out=str(tmp_path)))
    monkeypatch.setattr(paired_processes, "SETUP_S", 1.5)
    cpu = str(min(os.sched_getaffinity(0)))
    pct, got = paired_processes.run_pairs(str(script), [], ("a", "b"), 1, 2.0, cpu, log=lambda _s: None,
                                          slice_s=slice_s)
    steps_a, steps_b, switches = _switches(tmp_path)
    assert got[0]["a"]["steps"] > 50 and got[0]["b"]["steps"] > 50, got
    assert steps_a > 50 and steps_b > 50
    if slice_s:
        # 2 s in 0.1-s turns: about 20 hand-overs (a busy machine may stretch a turn, never split one)
        assert 8 <= switches <= 2.0 / slice_s + 6, switches
        # each child ran about half the interval: its CPU per step is its own step's, not its twin's as well
        assert abs(steps_a - steps_b) < 0.5 * max(steps_a, steps_b)
    else:
        # at once on one CPU the scheduler switches them every few ms: many more hand-overs than slices make
        assert switches > 2.0 / 0.1 + 6, switches


def test_the_monitors_clock_is_scaled_by_the_childs_share_of_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child of a pair runs half the wall clock: the monitor's clock-driven intervals are made twice as long and its
    probes half as frequent, so each step carries as many as in a job alone (clock_share says why); the Gaps and the
    Monitor made afterwards take them, as does the tail's sampler (one more halving)."""
    from profiler import thresholds as th
    from profiler.instrument.gaps import Gaps
    from profiler.monitor import procs
    from profiler.samplers import background

    for name in (*paired_processes.MONITOR_CLOCK_DURATIONS, *paired_processes.MONITOR_CLOCK_RATES):
        monkeypatch.setattr(th, name, getattr(th, name))  # put back after the test
    monkeypatch.setattr(procs, "USS_EVERY_S", procs.USS_EVERY_S)
    monkeypatch.setattr(background, "TAIL_HALVINGS", background.TAIL_HALVINGS)
    assert paired_processes.clock_share("slices") == paired_processes.clock_share("shared") == 0.5
    assert paired_processes.clock_share("apart") == 1.0
    window, hz, halvings = th.MONITOR_MIN_WINDOW_S, th.MONITOR_GAP_HZ, background.TAIL_HALVINGS
    got = paired_processes.scale_monitor_clock(0.5)
    assert got["MONITOR_MIN_WINDOW_S"] == th.MONITOR_MIN_WINDOW_S == 2 * window
    assert th.MONITOR_GAP_HZ == hz / 2
    assert Gaps(object()).tick_ns == int(1e9 / (hz / 2))  # type: ignore[arg-type]  # (made with the scaled rate)
    assert paired_processes.scale_run_clock(0.5) == background.TAIL_HALVINGS == halvings + 1
    assert paired_processes.scale_run_clock(1.0) == halvings + 1  # share 1: unchanged
    sampler = background.Sampler(0, interval_s=1.0)
    sampler.slow_down()  # the tail's halvings, read at the call
    assert sampler._halvings_due == halvings + 1
