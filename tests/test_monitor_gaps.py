"""NOTE [ Monitor gaps ] (profiler/instrument/gaps.py): between detail chunks the monitor's ``__next__`` hook is off the
job's path; its looks (on the job's thread, every few steps) count the steps (torch's ``_num_yielded``) and probe
one step at a time for the wait share.

What must hold: the windows' steps and samples stay exact over gaps, epochs (a partial last batch), a validation loader
in the middle of an epoch and workers; the job never sees an envelope; the wait share estimated over the gaps is the
job's (a job that waits twice as long as it computes); the hooks are torch's again after the block; gaps open only
where the monitor's next event is far enough off (short windows keep the hook on every step, as before).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.instrument import torch_hooks
from profiler.monitor.record import load

ROOT = Path(__file__).resolve().parents[1]

_JOB = """
import json, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
import torch.utils.data.dataloader as dl
import profiler

WORKERS, EPOCHS, LEN, WAIT_S, COMPUTE_S, WINDOW, OUT = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                                       float(sys.argv[4]), float(sys.argv[5]), sys.argv[6], sys.argv[7])
STOP = int(sys.argv[8])  # the last epoch breaks out of its loop after this many steps (0: it runs to its end)
if sys.argv[9:] == ["late"]:  # no margin: every epoch ends inside a gap
    from profiler.instrument.gaps import Gaps
    Gaps.margin = staticmethod(lambda: -1)

class Items(Dataset):
    def __len__(self): return LEN
    def __getitem__(self, i):
        if WAIT_S:
            time.sleep(WAIT_S)
        return torch.full((4,), float(i))

loader = DataLoader(Items(), batch_size=4, num_workers=WORKERS)  # LEN % 4 == 2: a partial last batch
val = DataLoader(Items(), batch_size=4, num_workers=0)
seen = 0
with profiler.profile(out=OUT, monitor=True, window=WINDOW, detail=8, quiet=True, plots=False) as mon:
    for epoch in range(EPOCHS):
        for i, x in enumerate(loader):
            assert type(x) is torch.Tensor, type(x)  # never an envelope
            seen += x.shape[0]
            if COMPUTE_S:
                time.sleep(COMPUTE_S)
            if epoch == 0 and i == LEN // 8:  # a validation pass in the middle of the epoch
                for v in val:
                    pass
            if STOP and epoch == EPOCHS - 1 and i + 1 == STOP:
                break  # and the iterator is dropped with the loop, mid-gap
    time.sleep(0.3)  # something else before the block ends (no loader)
gaps = mon._mon.session._gap
print(json.dumps({"seen": seen, "gaps": gaps.gaps if gaps is not None else None,
                  "next": dl._BaseDataLoaderIter.__next__.__qualname__}))
"""


def _run(tmp_path: Path, workers: int, epochs: int, length: int, wait_s: float, compute_s: float, window: str,
         stop: int = 0, late: bool = False) -> tuple[dict, list]:
    r = subprocess.run([sys.executable, "-c", _JOB, str(workers), str(epochs), str(length), str(wait_s),
                        str(compute_s), window, str(tmp_path / "mon"), str(stop)] + (["late"] if late else []),
                       capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), load(tmp_path / "mon").windows


def test_this_torch_has_the_gap_seam() -> None:
    """Seam 9 (torch_hooks.py): without it the monitor keeps its hook on every step; a torch that moved it fails."""
    from torch.utils.data import DataLoader

    assert torch_hooks.gap_problems() == []
    it = iter(DataLoader(list(range(10)), batch_size=2))
    assert torch_hooks.batches_yielded(it) == 0
    next(it)
    next(it)
    assert torch_hooks.batches_yielded(it) == 2
    assert torch_hooks.batches_yielded(object()) is None


@pytest.mark.parametrize("workers", [0, 2])
def test_steps_and_samples_stay_exact_over_gaps(workers: int, tmp_path: Path) -> None:
    """A fast loop in 1-s windows (chunks 0.25 s apart: gaps between them), two epochs of 3,000 batches, the last one
    partial, a validation pass in the middle of the first: every step and sample counted, the validation loader's
    time counted as such, most steps seen through gaps, and torch's ``__next__`` back after the block."""
    length = 4 * 3000 - 2
    got, ws = _run(tmp_path, workers, 2, length, 0.0, 0.0, "1s")
    assert got["seen"] == 2 * length
    assert sum(w.steps for w in ws) == 2 * 3000 and sum(w.samples for w in ws) == 2 * length
    assert got["next"] in ("_BaseDataLoaderIter.__next__", "_unwrapping_next")  # torch's, or the after-profiling one
    if got["gaps"]:  # (a loop this fast may not run 0.2 s between two chunks; probes: the next test)
        assert sum(w.estimated_steps for w in ws) > 0
    assert sum(w.other_loader_s for w in ws) > 0
    for w in ws:
        assert w.estimated_steps <= w.steps and w.detail_steps <= w.steps
        assert 0.0 <= w.wait_share <= 1.0
        assert sum(w.idle_by_cause_s.values()) == pytest.approx(w.idle_s, rel=1e-3, abs=1e-6)


def test_an_epoch_that_ends_inside_a_gap_counts_its_partial_last_batch(tmp_path: Path) -> None:
    """No epoch margin (as when the gap thread was late on a busy machine, where CI once counted 23,998 samples for
    23,996): each epoch's last batch, of 2 samples, is handed out inside a gap; it is counted as 2, not as the 4 of
    the batch before the gap."""
    length = 4 * 3000 - 2
    got, ws = _run(tmp_path, 0, 2, length, 0.0, 0.0, "1s", late=True)
    assert got["seen"] == 2 * length
    assert sum(w.steps for w in ws) == 2 * 3000 and sum(w.samples for w in ws) == 2 * length


def test_wait_share_is_estimated_from_probes(tmp_path: Path) -> None:
    """A job that waits ~2 ms per batch (four 0.5-ms samples, num_workers=0) and computes ~1 ms: the windows made
    mostly of gap steps say it waits about two thirds of the time (the probes' ratio estimate; a gap that took the
    wait as 0 or as everything would be far off)."""
    got, ws = _run(tmp_path, 0, 1, 4 * 1200, 0.0005, 0.001, "2s")
    assert got["gaps"] and got["gaps"] > 0
    # (not the window with the validation pass: it lies inside one training step's compute, as in ``run``)
    gapped = [w for w in ws if w.estimated_steps > w.steps // 2 and w.probe_steps >= 8 and not w.other_loader_s]
    assert gapped, [(w.steps, w.estimated_steps, w.probe_steps) for w in ws]
    for w in gapped:
        assert 0.45 < w.wait_share < 0.9, (w.wait_share, w.steps, w.estimated_steps, w.probe_steps)
        # the probes' own share and its 95 % half-width (delta method), as the window records them
        assert w.probe_wait_share is not None and w.probe_wait_share_pm is not None
        assert 0.45 < w.probe_wait_share < 0.9 and 0.0 < w.probe_wait_share_pm < 0.3, w


def test_short_windows_keep_the_hook_on_every_step(tmp_path: Path) -> None:
    """Windows of 50 steps (the chunks a dozen steps apart): no gap opens, every step seen by the hook."""
    got, ws = _run(tmp_path, 0, 1, 4 * 200 - 2, 0.0, 0.0, "50")
    assert got["gaps"] == 0 and all(w.estimated_steps == 0 for w in ws)
    assert sum(w.steps for w in ws) == 200


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loop_left_mid_gap_keeps_its_count(workers: int, tmp_path: Path) -> None:
    """The job breaks out of its loop in the middle of an epoch (a gap open) and drops the iterator, then does
    something else until the block ends: the steps it took are all counted (the gap holds the iterator weakly, so
    it goes at once, and the count of its last step was copied as it was taken)."""
    length = 4 * 3000
    got, ws = _run(tmp_path, workers, 2, length, 0.0, 0.0, "1s", stop=2345)
    assert got["seen"] == length + 4 * 2345
    assert sum(w.steps for w in ws) == 3000 + 2345 and sum(w.samples for w in ws) == got["seen"]


def test_detail_chunks_after_gaps_detail_the_batches_they_planned(tmp_path: Path) -> None:
    """With ``num_workers=0`` the fetcher counts the batches it makes through the gaps too (NOTE [ Monitor
    sampling ]): were its count to fall behind the iterator's over a gap, the next chunk's range would index the
    wrong batches and the windows would hold fewer detail steps than asked (measured with the count frozen over the
    gaps: 2, 0, 0 instead of 8, 8). ``detail=8`` per 1-s window: every full window gets its 8 after its gaps."""
    got, ws = _run(tmp_path, 0, 2, 4 * 3000 - 2, 0.0, 0.0003, "1s")
    assert got["seen"] == 2 * (4 * 3000 - 2)
    assert got["gaps"] and got["gaps"] > 1
    full = ws[:-1]  # the last window ends with the job, part of the way through
    assert full and sum(w.estimated_steps for w in full) > 0
    # The window that holds the validation pass may lose its last chunk (2 steps): its chunks are placed by time and
    # by its steps alike, and a window whose time ran out in the pass (cut at the step after it: 1,500 steps, 6 in
    # detail, once in a loaded suite) never reached the steps of its fourth.
    seen = [(w.steps, w.detail_steps, w.other_loader_s) for w in ws]
    assert [w.detail_steps for w in full if not w.other_loader_s] == [8] * sum(not w.other_loader_s for w in full), seen
    assert all(w.detail_steps >= 6 for w in full if w.other_loader_s), seen
    assert any(not w.other_loader_s for w in full), seen  # (a fast machine's job holds three windows in all)
