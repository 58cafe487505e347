"""``profiler monitor``: the whole job as a sequence of windows (a ``run`` is one window, ``monitor`` is many).

- windows.py: the cut — the steps a long-lived Session recorded since the last cut are taken out of it and summarised
  by the same functions ``run`` uses (collect.timeline, stats, attribution, verdict), then dropped;
- procs.py: the process tree's memory and byte counters at a cut (/proc);
- fold.py: the bounded record (old windows folded pairwise, detail kept around change points);
- changes.py: change points (cause, throughput, memory growth, periodic stalls) with the statistic that found them;
- record.py: monitor.json (kind ``monitor``), written atomically at cuts and when the job ends;
- runner.py: the Session, the cuts and the writes around the user's job (CLI and API);
- exporters/: TensorBoard, W&B and MLflow, renderers of the record's windows (never on the hot path).
"""
from __future__ import annotations
