"""Instrumentation that runs inside the DataLoader workers, through public hooks only.

- ``StreamBatchSampler`` (a batch_sampler) yields ``[(batch_no, index), ...]``: the dataset then knows which batch each
  sample belongs to without relying on how the DataLoader assigns batches to workers.
- ``TimedImageDataset`` times read / decode / augment per sample.
- ``TimedCollate`` (the collate_fn) times collation and packs the spans into a ``BatchMeta`` that travels with the
  batch, so the main process learns everything the worker did at the moment it receives the batch.
See the NOTE in ``profiler/harness/__init__.py`` for the clocks.
"""
from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

from ..storage.residency import file_resident_bytes

# Column layout of BatchMeta.samples (int64): one row per attempted sample.
COL_INDEX, COL_READ0, COL_READ1, COL_DECODE1, COL_AUGMENT1, COL_BYTES, COL_PIXELS = range(7)
SAMPLE_COLUMNS = ("index", "read_start", "read_end", "decode_end", "augment_end", "bytes", "pixels")


@dataclass
class Skipped:
    """A sample whose file could not be read or decoded; collate drops it and the record lists it."""
    index: int
    batch_no: int
    path: str
    reason: str
    row: tuple


@dataclass
class BatchMeta:
    """What a worker did for one batch. Plain attributes only, so pin_memory passes it through untouched."""
    batch_no: int
    worker_id: int  # -1: loaded in the main process (workers = 0)
    pid: int
    collate_start_ns: int
    collate_end_ns: int
    samples: np.ndarray  # int64, shape (n, 7), SAMPLE_COLUMNS
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (index, path, reason)
    # /proc/self/io of the producing process right after this batch: (rchar, read_bytes), cumulative; (-1, -1) if
    # unavailable. Carried in the batch because workers exit at the end of the loader, often before a background
    # sampler's next look, and short runs would otherwise lose their I/O accounting.
    io: tuple[int, int] = (-1, -1)


class StreamBatchSampler(Sampler):
    """Full batches from a continuous stream of per-epoch shuffles: no short last batch, no worker restart per epoch.

    Yields lists of ``(batch_no, index)`` so each sample carries its batch number into the worker.
    """

    def __init__(self, n: int, batch_size: int, total_batches: int, seed: int = 0, shuffle: bool = True):
        self.n, self.batch_size, self.total_batches, self.seed, self.shuffle = n, batch_size, total_batches, seed, shuffle

    def __len__(self) -> int:
        return self.total_batches

    def _indices(self) -> Iterator[int]:
        epoch = 0
        while True:
            if self.shuffle:
                yield from np.random.default_rng(self.seed + epoch).permutation(self.n).tolist()
            else:
                yield from range(self.n)
            epoch += 1

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        stream = self._indices()
        for b in range(self.total_batches):
            yield [(b, next(stream)) for _ in range(self.batch_size)]


class TimedImageDataset(Dataset):
    """Image files → (tensor, label), timing read (open + read bytes), decode (bytes → RGB image), augment (→ tensor).

    ``read_hook`` (optional) is charged, inside the read span, with the bytes of the file that were not in the page
    cache (mincore): the userspace storage emulation sleeps for a slow device's cost, so emulated device time counts
    as read time exactly like real slow reads, and cached files are free, as on a real disk.
    """

    def __init__(self, files: Sequence[str], labels: Sequence[int], transform: Callable,
                 read_hook: Any | None = None):
        # Paths as one byte buffer + offsets, labels as an int64 array: lists of Python objects are copied page by
        # page into every worker as their refcounts change (pytorch#13246), and a fixed-width numpy string array
        # would take 4 bytes per character of the *longest* path for every file (400 MB for 1M paths).
        encoded = [os.fsencode(f) for f in files]
        self._paths = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self._offsets = np.cumsum([0] + [len(e) for e in encoded], dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.transform = transform
        self.read_hook = read_hook

    def __len__(self) -> int:
        return len(self.labels)

    def path(self, index: int) -> str:
        return os.fsdecode(self._paths[self._offsets[index]:self._offsets[index + 1]].tobytes())

    def __getitem__(self, key):
        batch_no, index = key if isinstance(key, tuple) else (-1, key)
        from PIL import Image

        path = self.path(index)
        clock = time.perf_counter_ns
        t0 = clock()
        nbytes = 0
        try:
            with open(path, "rb") as f:
                if self.read_hook is not None:
                    # Emulated slow storage charges only what the page cache does not hold, as a real disk would.
                    size = os.fstat(f.fileno()).st_size
                    cold = size - (file_resident_bytes(f.fileno(), size) or 0)
                data = f.read()
            nbytes = len(data)
            if self.read_hook is not None and cold > 0:
                self.read_hook.charge(cold)
            t1 = clock()
        except OSError as e:
            t1 = clock()
            return Skipped(index, batch_no, path, f"read: {e.strerror or e}", (index, t0, t1, t1, t1, nbytes, 0))
        try:
            if nbytes == 0:
                raise ValueError("empty file")
            img = Image.open(io.BytesIO(data))
            img = img.convert("RGB")  # forces the full decode inside the decode span
            t2 = clock()
        except Exception as e:  # PIL raises many types for bad files; every one means "skip this file"
            t2 = clock()
            return Skipped(index, batch_no, path, f"decode: {type(e).__name__}: {e}", (index, t0, t1, t2, t2, nbytes, 0))
        x = self.transform(img)
        t3 = clock()
        return x, int(self.labels[index]), (index, t0, t1, t2, t3, nbytes, img.width * img.height), batch_no


class TimedCollate:
    """collate_fn: stacks the good samples, drops skipped ones, and attaches the batch's spans as BatchMeta."""

    def __call__(self, items: list) -> tuple[torch.Tensor | None, torch.Tensor | None, BatchMeta]:
        t0 = time.perf_counter_ns()
        good = [it for it in items if not isinstance(it, Skipped)]
        bad = [it for it in items if isinstance(it, Skipped)]
        if good:
            images = torch.stack([it[0] for it in good])
            labels = torch.tensor([it[1] for it in good], dtype=torch.int64)
            batch_no = good[0][3]
        else:
            images = labels = None
            batch_no = bad[0].batch_no if bad else -1
        rows = [it[2] for it in good] + [b.row for b in bad]
        samples = np.array(rows, dtype=np.int64).reshape(-1, len(SAMPLE_COLUMNS))
        info = get_worker_info()
        t1 = time.perf_counter_ns()
        meta = BatchMeta(batch_no, info.id if info is not None else -1, os.getpid(), t0, t1, samples,
                         [(b.index, b.path, b.reason) for b in bad], _self_io())
        return images, labels, meta


def _self_io() -> tuple[int, int]:
    """(rchar, read_bytes) of this process from /proc/self/io: bytes asked for vs bytes from the block device."""
    try:
        with open("/proc/self/io", "rb") as f:
            fields = dict(line.split(b": ") for line in f.read().splitlines() if b": " in line)
        return int(fields[b"rchar"]), int(fields[b"read_bytes"])
    except (OSError, KeyError, ValueError):
        return -1, -1


def seed_worker(worker_id: int) -> None:
    """worker_init_fn: numpy is not reseeded per worker by torch; random and torch are."""
    np.random.seed((torch.initial_seed() + worker_id) % 2**32)
