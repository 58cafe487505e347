"""Copy-on-read vs heap growth (issue 31, item 9), in a fresh process: prints the run.json ``samples`` of a fork
DataLoader's processes (RSS and USS) as JSON. argv: 'rows' (100k dicts read by 4 workers: pages shared with the main
process turn private) or 'hoarder' (2 workers keep what they make: new allocations).

Its own process because what a worker's writes land on depends on the parent's heap: in a pytest-xdist worker that
ran other tests first, the heap holds freed pages the workers inherit, and filling those is USS up with RSS flat.
"""
from __future__ import annotations

import json
import multiprocessing
import sys
import time

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    """A list of 100k Python dicts (COCO-style metadata): reading one writes its reference counts."""

    def __init__(self, n: int) -> None:
        self.rows = [{"path": f"/data/shard{i % 97:03d}/img_{i:08d}.jpg", "label": i % 1000,
                      "caption": "a photo of item number " + str(i) * 40,
                      "boxes": [[i, 2.0, 3.0, 4.0], [i, 5.0, 6.0, 7.0]], "tags": [f"t{i}", f"u{i}", f"v{i}"]}
                     for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        r = self.rows[i]
        return torch.tensor([r["label"], len(r["path"]), len(r["caption"]), sum(b[0] for b in r["boxes"]),
                             sum(len(t) for t in r["tags"])])


class Hoarder(Dataset):
    """No shared objects to copy: each worker keeps what it makes (a cache filled as it goes): new allocations."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray] = []

    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> torch.Tensor:
        self.kept.append(np.ones(64 * 1024, dtype=np.float64))  # 512 KiB kept per sample
        return torch.tensor(i)


def _sampled(dataset: Dataset, batch: int, sampler: list[int] | None, workers: int, every: int) -> dict:
    """Iterate a fork DataLoader, reading every process's RSS / USS every ``every`` batches: a run.json ``samples``."""
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers,
                        multiprocessing_context=multiprocessing.get_context("fork"))
    me = psutil.Process()
    t0 = time.perf_counter()
    series: dict[int, dict] = {}
    for k, _ in enumerate(loader):
        if k % every:
            continue
        t = time.perf_counter() - t0
        for proc in [me, *me.children()]:
            try:
                mem = proc.memory_full_info()
            except psutil.NoSuchProcess:
                continue
            e = series.setdefault(proc.pid, {"pid": proc.pid, "role": "main" if proc.pid == me.pid else "worker",
                                             "worker_id": None, "t_s": [], "rss_bytes": [], "uss_bytes": []})
            e["t_s"].append(t)
            e["rss_bytes"].append(mem.rss)
            e["uss_bytes"].append(mem.uss)
    return {"processes": list(series.values())}


if __name__ == "__main__":
    if sys.argv[1] == "rows":
        n = 100_000
        # Each batch takes one row from each of 50 stretches of the list, so every worker walks every page through
        # the epoch: steady copying, as a shuffled epoch over a larger list does.
        order = np.arange(n).reshape(50, -1).T.ravel().tolist()
        print(json.dumps(_sampled(Rows(n), 50, order, 4, 150)))
    else:
        print(json.dumps(_sampled(Hoarder(), 4, None, 2, 5)))
