"""The monitor across a torchrun job's ranks (profiler/monitor/ranks.py): the ranks' windows aligned on the job's
step, the rank whose input lagged the others' named with when and why; noise and a one-window burst are not.

The real torchrun job (one rank's input slowed mid-run, `report` on the folder) is in test_monitor.py
(test_torchrun_ranks_each_monitored_into_one_folder); these build the records directly, as a saved monitor.json holds
them, to pin the rule at its edges."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.monitor.ranks import analyze
from profiler.monitor.record import MonitorRecord
from profiler.monitor.windows import WindowSummary


def _w(i: int, first: int, last: int, t0: float, secs: float, share: float, cause: str = "io",
       read: int = 0) -> WindowSummary:
    idle = share * secs
    return WindowSummary(index=i, span=1, step_first=first, step_last=last, epoch=0, start_s=t0, end_s=t0 + secs,
                         steps=last - first + 1, samples=4 * (last - first + 1), detail_steps=4, idle_s=idle,
                         idle_by_cause_s={cause: idle}, stage_s={}, stage_per={}, stage_obs={}, outside_s=0.0,
                         other_loader_s=0.0, workers=2, processes=3, rss_bytes=10**8, uss_bytes=10**8, rchar=read,
                         read_bytes=read, bottleneck="io" if share > 0.3 else "compute", severity="", summary="")


def _rec(shares: list[float], per: int = 100, secs: float = 10.0, offset: int = 0, causes: str | None = None,
         reads: list[int] | None = None) -> MonitorRecord:
    """One rank: a window per share, ``per`` steps each (the first ``offset`` steps longer: cut elsewhere)."""
    rec = MonitorRecord(status="ended")
    step, t = 0, 0.0
    for i, s in enumerate(shares):
        n = per + (offset if i == 0 else 0)
        rec.log.windows.append(_w(i, step, step + n - 1, t, secs, s, causes or "io",
                                  (reads or [0] * len(shares))[i]))
        step += n
        t += secs
    rec.windows_total, rec.steps_total = len(shares), step
    return rec


def test_the_rank_whose_input_lagged_is_named_with_its_steps_cause_and_bytes() -> None:
    # rank 1's node reads from its disk from window 3 to 6 (waits 45 %); rank 0 and rank 2 stay at 3-5 %. The ranks
    # cut their windows at different steps (rank 2's are offset by 37 steps).
    base = [0.03, 0.05, 0.04, 0.04, 0.05, 0.03, 0.04, 0.05, 0.04, 0.03]
    slow = [0.04, 0.04, 0.03, 0.45, 0.47, 0.44, 0.46, 0.05, 0.04, 0.04]
    reads = [0, 0, 0, 80_000_000, 90_000_000, 85_000_000, 80_000_000, 0, 0, 0]
    v = analyze({0: _rec(base), 1: _rec(slow, reads=reads), 2: _rec(base[::-1], offset=37)})
    assert [g.rank for g in v.lags] == [1], v.lags
    g = v.lags[0]
    assert 300 <= g.step_first <= 337 and 699 - 37 <= g.step_last <= 699, (g.step_first, g.step_last)
    assert not g.to_end and g.cause == "io" and g.wait_share > 0.4 and g.others_share < 0.06
    assert g.read_mb_s > 7 and g.others_read_mb_s == 0.0
    assert "rank 1 waited" in g.summary and "storage device" in g.summary and v.headline.startswith("Rank 1 waited")
    assert [r.rank for r in v.rows] == [0, 1, 2] and v.rows[1].wait_share > v.rows[0].wait_share


def test_a_lag_to_the_end_says_so_and_a_one_window_burst_is_not_named() -> None:
    base = [0.05] * 8
    burst = [0.05, 0.05, 0.60, 0.05, 0.05, 0.05, 0.05, 0.05]  # one window: a neighbour's burst
    late = [0.05, 0.05, 0.05, 0.05, 0.05, 0.30, 0.35, 0.40]  # its cache ran out: to the end
    v = analyze({0: _rec(base), 1: _rec(burst), 2: _rec(late, causes="cpu"), 3: _rec(base)})
    assert [(g.rank, g.to_end, g.cause) for g in v.lags] == [(2, True, "cpu")], v.lags
    assert "to the end" in v.lags[0].summary


def test_ranks_that_differ_by_noise_alone_are_not_a_lag() -> None:
    import random

    rng = random.Random(7)
    recs = {r: _rec([0.20 + rng.uniform(-0.04, 0.04) for _ in range(12)], offset=r * 13) for r in range(8)}
    v = analyze(recs)
    assert v.lags == [] and v.headline.startswith("No rank's input lagged"), v.lags


def test_many_ranks_one_lags_only_beyond_the_others_spread() -> None:
    # 7 ranks spread 5-35 % (a wide spread), one at 47 %: 12 points above the median but within 4 robust sigmas
    spread = [0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35]
    recs = {r: _rec([s] * 6) for r, s in enumerate(spread)}
    recs[7] = _rec([0.47] * 6)
    assert analyze(recs).lags == []
    tight = {r: _rec([0.20 + 0.005 * r] * 6) for r in range(7)}
    tight[7] = _rec([0.47] * 6)
    assert [g.rank for g in analyze(tight).lags] == [7]


def test_a_rank_that_crashed_drops_out_of_the_later_steps() -> None:
    v = analyze({0: _rec([0.05] * 8), 1: _rec([0.05] * 3), 2: _rec([0.05] * 8)})
    assert v.lags == [] and v.bins[-1].share.keys() == {0, 2} and v.bins[0].share.keys() == {0, 1, 2}


@pytest.mark.slow
def test_report_draws_the_ranks_side_by_side_from_saved_records_live_or_ended(tmp_path: Path) -> None:
    import subprocess
    import sys

    from _util import repo_env

    base = [0.05] * 6
    for r, rec in {0: _rec(base), 1: _rec([0.05, 0.05, 0.5, 0.5, 0.5, 0.5]), 2: _rec(base)}.items():
        rec.job = {"target": "job.py", "rank": r, "world_size": 3}
        rec.status = "running" if r == 2 else "ended"  # a live folder: rank 2 still writing
        rec.save(tmp_path / "job" / f"rank{r}")
    p = subprocess.run([sys.executable, "-m", "profiler", "report", "job"], capture_output=True, text=True,
                       cwd=tmp_path, env=repo_env(), timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Across the 3 ranks" in p.stdout and "Rank 1 waited 50 %" in p.stdout, p.stdout[-3000:]
    assert "(still running, drawn as far as recorded: rank 2)" in p.stdout, p.stdout[-3000:]
    html = (tmp_path / "job" / "monitor_ranks.html").read_text()
    assert "Rank 1&#x27;s input lagged from step 200 to the end: io" in html and "rank 1 waited 50 %" in html \
        and "rank0/monitor.html" in html
    assert (tmp_path / "job" / "monitor_ranks.png").stat().st_size > 5000


def test_a_long_job_of_many_ranks_is_compared_on_a_bounded_grid() -> None:
    """32 ranks of 512 windows each, every rank cutting elsewhere: 16,000 boundaries, drawn on at most MAX_BINS bins;
    the one rank whose cache ran out for 100 of its windows is still named over those steps."""
    import random

    from profiler.monitor.ranks import MAX_BINS

    rng = random.Random(1)
    recs = {r: _rec([0.2 + rng.uniform(-0.02, 0.02) for _ in range(512)], per=100 + r, offset=r * 7)
            for r in range(32)}
    recs[5] = _rec([0.2] * 200 + [0.6] * 100 + [0.2] * 212, per=105, offset=35)
    v = analyze(recs)
    assert len(v.bins) <= MAX_BINS and [g.rank for g in v.lags] == [5], v.lags
    first, last = 35 + 200 * 105, 35 + 300 * 105 - 1  # its slow windows' steps
    assert abs(v.lags[0].step_first - first) < 200 and abs(v.lags[0].step_last - last) < 200, v.lags[0]
