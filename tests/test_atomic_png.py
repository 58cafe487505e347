"""Every PNG the registries write (profiler/render: REPORT, COMPARE, FIT, SWEEP, RANKS, ATTACH) is written atomically:
when the disk cannot take the whole file, the previous report's PNG is still there, whole (``fig.savefig(path)``
truncates it, then fails), and a new folder is left with no partial file and no temporary; only the error is raised.

The full disk is real: a child process whose file-size limit (RLIMIT_FSIZE) is a few KiB, smaller than any of the
figures, so the kernel refuses the write midway (EFBIG, with SIGXFSZ ignored as a process that handles it would) —
what a disk filling up during the write does, without needing root to mount a small filesystem. The child first
writes every PNG without the limit (the previous report), so the renderers are known to work on these inputs and
each file is known to exceed the limit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 4096  # bytes: a figure's PNG is tens of KiB

CHILD = r"""
import copy, errno, json, resource, signal, sys
from pathlib import Path

sys.path.insert(0, sys.argv[3])  # tests/: the hand-built record
from _records import record_v2

from profiler.analysis import analyze
from profiler.analysis.compare import compare
from profiler.distributed.merge import merge
from profiler.record import RunRecord
from profiler.render import REGISTRIES, REPORT, COMPARE, FIT, SWEEP, RANKS, ATTACH

rec = analyze(RunRecord.from_dict(record_v2()))
ranks = {}
for r in (0, 1):
    d = copy.deepcopy(rec.to_dict())
    d["distributed"] = {"rank": r, "world_size": 2, "boot_id": "x", "t0_monotonic_ns": 5, "collectives": None}
    ranks[r] = d
gib = 1024 ** 3
inputs = {
    REPORT: rec, ATTACH: rec, RANKS: merge(ranks),
    COMPARE: compare([rec, analyze(RunRecord.from_dict(record_v2()))], force=True),
    FIT: {"breakdown": {"model": "resnet18", "mode": "train", "batch_size": 64, "precision": "fp32", "amp": False,
                        "image_size": 224, "weights_bytes": gib, "gradients_bytes": gib, "total_bytes": 2 * gib},
          "gpu_bytes": 16 * gib},
    SWEEP: {"points": [{"index": i, "label": f"workers {i}", "measured_samples_per_s": 100.0 + 50 * i,
                        "predicted_samples_per_s": 90.0 + 50 * i, "interval": [95.0 + 50 * i, 105.0 + 50 * i]}
                       for i in range(3)], "baseline": 0, "best": {"label": "workers 2"}, "median_abs_error": 0.1},
}
pngs = [(reg, r) for reg in REGISTRIES for r in reg if r.file.endswith(".png")]
assert set(inputs) == set(REGISTRIES)  # an input for every registry, so none of its PNGs is left out

result = {"sizes": {}, "errors": {}}
before, fresh = Path(sys.argv[1]), Path(sys.argv[2])
for reg, r in pngs:  # a previous report in ``before``, written as usual
    (before / r.name).mkdir()
    (fresh / r.name).mkdir()
    result["sizes"][r.name] = r.render(inputs[reg], before / r.name, {}).stat().st_size
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[4]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
for reg, r in pngs:  # the same report again over it, and into an empty folder, on the "full disk"
    for folder in (before, fresh):
        try:
            r.render(inputs[reg], folder / r.name, {})
            result["errors"][f"{folder.name}/{r.name}"] = None
        except OSError as e:
            result["errors"][f"{folder.name}/{r.name}"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(result))
"""


def test_a_png_that_does_not_fit_leaves_the_previous_one_or_nothing(tmp_path):
    before, fresh = tmp_path / "before", tmp_path / "fresh"
    before.mkdir()
    fresh.mkdir()
    p = subprocess.run([sys.executable, "-c", CHILD, str(before), str(fresh), str(Path(__file__).parent), str(LIMIT)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"})
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    names = {"step_time", "where_time_went", "timeline", "utilisation", "latency", "what_would_help", "compare_png",
             "fit_png", "sweep_png", "ranks_png", "attach_shares"}
    assert set(got["sizes"]) == names  # every PNG of every registry (a new one joins this list)
    assert got["errors"] == {f"{f}/{n}": "EFBIG" for f in ("before", "fresh") for n in names}, got["errors"]
    for name, size in got["sizes"].items():
        (png,) = (before / name).iterdir()  # the previous PNG, whole (matplotlib alone truncates it), no temporary
        data = png.read_bytes()
        assert size > LIMIT and len(data) == size, (name, size, len(data))
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[-8:-4] == b"IEND", name
        assert list((fresh / name).iterdir()) == [], name  # no partial file, no temporary
