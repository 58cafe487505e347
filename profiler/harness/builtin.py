"""The built-in pipeline: an ordinary Dataset, DataLoader and training loop — profiled like any user's job.

Nothing here times anything. The dataset names its file read with ``profiler.stage("read")``; PIL's decode and the
torchvision transforms are named by the instrumentation's library sub-stages (instrument/substages.py), exactly as
they would be in a user's dataset; the loop names its host→device copy ``stage("h2d")``. One timing path for both.
"""
from __future__ import annotations

import io
import os
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from ..instrument.substages import stage
from ..instrument.worker import report_skipped
from ..storage.residency import file_resident_bytes
from .data import bounded_read
from .job import OutOfDeviceMemory


class StreamBatchSampler(Sampler):
    """Full batches from a continuous stream of per-epoch shuffles: no short last batch, no worker restart per epoch
    (a run's steps are one loader epoch, however many dataset epochs they span).

    Under DDP (``world_size`` > 1; profiler/distributed), DistributedSampler-style: every rank draws the same seeded
    permutation per epoch and takes every ``world_size``-th index from ``rank`` on, so the ranks' shares are disjoint.
    """

    def __init__(self, n: int, batch_size: int, total_batches: int, seed: int = 0, shuffle: bool = True,
                 rank: int = 0, world_size: int = 1):
        self.n, self.batch_size, self.total_batches = n, batch_size, total_batches
        self.seed, self.shuffle = seed, shuffle
        self.rank, self.world_size = rank, world_size  # distributed: this rank's share of each epoch

    def __len__(self) -> int:
        return self.total_batches

    def _indices(self) -> Iterator[int]:
        epoch = 0
        while True:
            if self.shuffle:
                order = np.random.default_rng(self.seed + epoch).permutation(self.n).tolist()
            else:
                order = list(range(self.n))
            yield from order[self.rank::self.world_size]  # distributed: disjoint shares (the whole epoch when 1)
            epoch += 1

    def __iter__(self) -> Iterator[list[int]]:
        stream = self._indices()
        for _ in range(self.total_batches):
            yield [next(stream) for _ in range(self.batch_size)]


class ImageDataset(Dataset):
    """Image files → (tensor, label); a file that cannot be read, decoded or transformed is skipped (None) and
    reported, so one bad sample never ends the run.

    ``read_hook`` (optional) is charged, inside the read stage, with the bytes of the file the page cache does not
    hold (mincore): the userspace storage emulation then sleeps for a slow device's cost, and cached files are free,
    as on a real disk.
    """

    def __init__(self, files: Sequence[str], labels: Sequence[int], transform: Callable, read_hook: Any = None):
        # Paths as one byte buffer + offsets, labels as an int64 array: lists of Python objects are copied page by
        # page into every worker as their refcounts change (pytorch#13246).
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

    def _read(self, path: str) -> bytes:
        # O_NONBLOCK: a FIFO swapped in after the scan must not block the open (bounded_read then refuses it).
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if self.read_hook is not None:
                cold = size - (file_resident_bytes(f.fileno(), size) or 0)
            data = bounded_read(f)
        if self.read_hook is not None and cold > 0:
            self.read_hook.charge(cold)
        return data

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | None:
        from PIL import Image

        path = self.path(index)
        try:
            with stage("read"):
                data = self._read(path)
        except OSError as e:
            report_skipped(index, path, f"read: {e.strerror or e}")
            return None
        try:
            if not data:
                raise ValueError("empty file")
            img = Image.open(io.BytesIO(data)).convert("RGB")  # convert forces the full decode now
        except Exception as e:  # noqa: BLE001 - PIL raises many types for bad files; each means "skip this file"
            report_skipped(index, path, f"decode: {type(e).__name__}: {e}")
            return None
        try:
            x = self.transform(img)
        except Exception as e:  # noqa: BLE001 - e.g. a 1x60000 image Resize cannot handle: skip, with the reason
            report_skipped(index, path, f"transform: {type(e).__name__}: {e}")
            return None
        return x, int(self.labels[index])


def collate_skipping(items: list) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Stack the samples that loaded; skipped ones (None) are dropped. A batch of only bad files is (None, None)."""
    good = [it for it in items if it is not None]
    if not good:
        return None, None
    return torch.stack([it[0] for it in good]), torch.tensor([it[1] for it in good], dtype=torch.int64)


def seed_worker(worker_id: int) -> None:
    """worker_init_fn: numpy is not reseeded per worker by torch; random and torch are."""
    np.random.seed((torch.initial_seed() + worker_id) % 2**32)


def make_step_fn(model: torch.nn.Module | None, mode: str, device: torch.device, amp: bool
                 ) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """The compute of one step: forward (+ loss, backward, optimizer step in train mode)."""
    if model is None:
        return lambda x, y: None
    from .models import primary_output

    loss_fn = torch.nn.CrossEntropyLoss()
    # Plain SGD with momentum: the optimizer's state size matters to memory, its learning rate not to speed.
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if mode == "train" else None
    autocast = None
    scaler = None
    if amp:
        from .models import amp_dtype, needs_grad_scaler

        dtype = amp_dtype(device)
        autocast = lambda: torch.autocast(device.type, dtype=dtype)  # noqa: E731
        if mode == "train" and needs_grad_scaler(dtype, mode):
            scaler = torch.amp.GradScaler(device.type)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
        if autocast:
            with autocast():
                loss = loss_fn(primary_output(model(x)), y)
        else:
            loss = loss_fn(primary_output(model(x)), y)
        assert opt is not None  # train mode always has one
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    def infer_step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.inference_mode():
            if autocast:
                with autocast():
                    model(x)
            else:
                model(x)

    if mode == "train":
        model.train()
        return train_step
    model.eval()
    return infer_step


def builtin_loop(loader: Any, step_fn: Callable, device: torch.device, non_blocking: bool) -> None:
    """The plain training loop the built-in pipeline runs (the session ends it when the window closes)."""
    step = 0
    for x, y in loader:
        if x is not None:
            try:
                with stage("h2d"):
                    x = x.to(device, non_blocking=non_blocking)
                    y = y.to(device, non_blocking=non_blocking)
                step_fn(x, y)
            except torch.cuda.OutOfMemoryError as e:
                # Drop the exception (and with it the frames holding activations and the batch) before unwinding.
                msg = str(e).splitlines()[0]
                del e
                raise OutOfDeviceMemory(step, msg) from None
        step += 1
