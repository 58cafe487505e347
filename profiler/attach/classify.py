"""Sampled stacks → the project's vocabulary (profiler/vocab.py): which thread is which, and what each sample was.

The same names as ``run``: the well-known library calls ``run`` wraps (PIL and torchvision.io → decode, torchvision
transforms, albumentations, kornia augmentations and MONAI transforms → augment, MONAI's image loading → decode,
torchvision.io.read_file → read, torch.load / np.load under their own names), the default collate → collate, the
rest of the dataset's call → getitem; a worker's queue-feeder thread pickling and sending a batch → transfer. What
only ``attach`` sees is named too: a worker waiting for its next index (``idle``: not input time), the main thread
inside the DataLoader's ``__next__`` (``wait``), starting an epoch (``epoch_start``), and the main thread anywhere
else (``compute``: the model step, the optimiser, logging — whatever the job does between batches). Frames are
matched on the innermost library frame below the dataset's call, as ``run`` counts the innermost named stage (self
time).

torchdata's ``StatefulDataLoader`` is a DataLoader to the user: its workers run torchdata's own copy of the worker
loop (``torchdata/stateful_dataloader/worker.py``) and its iterators' ``__next__`` / ``_next_data`` / ``__iter__``
live in ``torchdata/stateful_dataloader/stateful_dataloader.py``; both files are read as torch's own
(``WORKER_PYS``, ``DATALOADER_PYS``). Its fetchers are torch's (``fetch.py``), so the stages inside are the same.
"""
from __future__ import annotations

from collections.abc import Sequence

from .pyspy import Frame

DATALOADER_PY = "torch/utils/data/dataloader.py"
WORKER_PY = "torch/utils/data/_utils/worker.py"
#: The files whose ``__next__`` / ``__iter__`` are a DataLoader's iterator's (the main thread's wait, an epoch's
#: start): torch's, and torchdata's StatefulDataLoader's (its iterators' ``__next__`` calls torch's, but its
#: ``__iter__`` / ``_get_iterator`` and, under the profiler, a ``__next__`` whose torch frame is hidden are its own).
DATALOADER_PYS = (DATALOADER_PY, "torchdata/stateful_dataloader/stateful_dataloader.py")
#: The files whose ``_worker_loop`` is a DataLoader worker's main loop: torch's, and torchdata's own copy, which every
#: StatefulDataLoader worker runs instead (torch's never appears in its stack: before this, attach found no worker
#: of a StatefulDataLoader job and read its wait as the main process's own reads).
WORKER_PYS = (WORKER_PY, "torchdata/stateful_dataloader/worker.py")
#: Where a main thread waits for a batch another thread of its process takes from the DataLoader (MONAI's
#: ThreadDataLoader: its ThreadBuffer's queue, instrument/relay.py). ``buffer_iterator``, not ThreadDataLoader's own
#: ``__iter__``, which also holds the epoch's start (its DataLoader.__iter__ runs before buffer_iterator is entered).
RELAY_WAITS = (("monai/data/thread_buffer.py", "buffer_iterator"),)
FETCH_PY = "torch/utils/data/_utils/fetch.py"
COLLATE_PY = "torch/utils/data/_utils/collate.py"
PIN_PY = "torch/utils/data/_utils/pin_memory.py"
QUEUES_PY = "multiprocessing/queues.py"
#: The profiler's own fetches (instrument/fetch.py ``instrumented_parts``, instrument/inline_fetch.py
#: ``inline_map_fetch``; before the split, instrument/worker.py), which stand in for torch's when the job being
#: attached to runs under ``profiler run``: their samples are the same fetch. Missing the moved files made every
#: worker of a job under ``run`` read as idle from outside, and the pair's verdicts disagree.
OWN_FETCH_PYS = ("profiler/instrument/fetch.py", "profiler/instrument/inline_fetch.py", "profiler/instrument/worker.py")

#: Thread roles.
MAIN, WORKER, WORKER_FEEDER, PIN_MEMORY, OTHER = "main", "worker", "worker_feeder", "pin_memory", "other"

#: Not input time: a worker waiting for an index, a feeder or pin thread with nothing to do.
IDLE = "idle"

# (path part, function-name suffix or "" for any, stage) — first match from the innermost frame outwards wins.
_LIBRARY_STAGES: tuple[tuple[str, str, str], ...] = (
    ("torchvision/io/", "read_file", "read"),
    ("torchvision/io/", "", "decode"),
    ("/PIL/", "", "decode"),
    ("torchvision/transforms/", "", "augment"),
    ("/albumentations/", "", "augment"),
    ("/kornia/augmentation/", "", "augment"),  # below it kornia's geometry/filters/enhance: the augmentation's work
    ("/monai/transforms/io/", "", "decode"),  # LoadImage reads and decodes in one call, as run names it
    ("/monai/transforms/", "", "augment"),
    ("torch/serialization.py", "", "torch.load"),
    ("numpy/lib/npyio.py", "load", "np.load"),
    ("numpy/lib/_npyio_impl.py", "load", "np.load"),
)


def _is(f: Frame, path: str, name: str = "") -> bool:
    return path in f.file and (not name or f.name == name or f.name.endswith("." + name))


def _any_is(f: Frame, paths: Sequence[str], name: str) -> bool:
    return any(_is(f, path, name) for path in paths)


def _worker_loop_at(frames: Sequence[Frame]) -> int | None:
    """Index of the (torch's or torchdata's) worker loop's frame, or None."""
    return next((i for i, f in enumerate(frames) if _any_is(f, WORKER_PYS, "_worker_loop")), None)


def in_dataloader(frames: Sequence[Frame]) -> bool:
    """Is any of these frames a DataLoader's (torch's or torchdata's StatefulDataLoader's) own code?"""
    return any(path in f.file for f in frames for path in DATALOADER_PYS)


def role(frames: Sequence[Frame], thread_name: str, in_worker_process: bool) -> str:
    if _worker_loop_at(frames) is not None:
        return WORKER
    if any(_is(f, PIN_PY, "_pin_memory_loop") for f in frames):
        return PIN_MEMORY
    if in_worker_process and (thread_name == "QueueFeederThread" or any(_is(f, QUEUES_PY, "_feed") for f in frames)):
        return WORKER_FEEDER
    if thread_name == "MainThread" and not in_worker_process:
        return MAIN
    return OTHER


def sample_stage(frames: Sequence[Frame]) -> str:
    """What the code below a dataset call was doing, by its innermost known library frame."""
    for f in reversed(frames):
        if _is(f, COLLATE_PY) or f.name.endswith("collate_fn") or f.name.endswith("collate"):
            return "collate"
        for path, name, stage in _LIBRARY_STAGES:
            if _is(f, path, name):
                return stage
    return "getitem"


def _producing(frames: Sequence[Frame], start: int) -> str | None:
    """The stage of a sample that is inside the DataLoader's fetch (below index ``start``), else None."""
    for i in range(start, len(frames)):
        f = frames[i]
        if _is(f, FETCH_PY, "fetch") or any(_is(f, own, "fetch") or _is(f, own, "lean_batch") for own in OWN_FETCH_PYS):
            return sample_stage(frames[i + 1:])
    return None


def worker_stage(frames: Sequence[Frame]) -> str:
    """A worker process's main thread: a stage, ``transfer`` (putting a batch on the queue), or ``idle``."""
    start = _worker_loop_at(frames) or 0
    st = _producing(frames, start)
    if st is not None:
        return st
    if any(_is(f, QUEUES_PY, "put") for f in frames[start:]):
        return "transfer"
    return IDLE


def feeder_stage(frames: Sequence[Frame]) -> str:
    """A worker's queue-feeder thread: pickling and sending a batch is transfer; waiting for one is idle."""
    inner = frames[-1] if frames else None
    if inner is None or inner.name.endswith("wait") or "threading.py" in inner.file:
        return IDLE
    return "transfer"


def pin_stage(frames: Sequence[Frame]) -> str:
    inner = frames[-1] if frames else None
    if inner is None or _is(inner, QUEUES_PY, "get") or "threading.py" in inner.file or inner.name.endswith("poll"):
        return IDLE
    return "transfer"


#: The main process's side of moving a batch from a worker (inside ``__next__``, below the data queue's ``get``):
#: rebuilding each shared-memory tensor (torch's reductions, fetching its file descriptor from the worker's resource
#: sharer) and reading and unpickling the message. Waiting for a batch is the queue's poll, none of these.
RECEIVE_FILES = ("torch/multiprocessing/reductions.py", "multiprocessing/resource_sharer.py",
                 "multiprocessing/reduction.py")
RECEIVE_NAMES = ("_recv_bytes", "recv_bytes", "loads")


def _receiving(frames: Sequence[Frame]) -> bool:
    """Inside the data queue's ``get``, taking a batch in (not polling for one). Why it matters: a batch of many
    tensors (each its own shared-memory fd, fetched from the worker by a socket handshake) can spend most of the wait
    here while the workers idle; split by the workers' mix alone, that wait read as cpu (85 %) where ``run`` measured
    transfer (57-61 %)."""
    start = next((i for i, f in enumerate(frames) if _is(f, QUEUES_PY, "get")), None)
    if start is None:
        return False
    for f in frames[start + 1:]:
        if any(path in f.file for path in RECEIVE_FILES):
            return True
        if f.name.rsplit(".", 1)[-1] in RECEIVE_NAMES:
            return True
    return False


def main_stage(frames: Sequence[Frame]) -> tuple[str, str | None]:
    """The main thread: (``wait`` | ``epoch_start`` | ``compute``, the worker-side stage when the main process loads
    the batch itself — workers = 0 —, ``transfer`` when it was taking a worker's batch in (``_receiving``), else
    None)."""
    for i, f in enumerate(frames):
        if _any_is(f, DATALOADER_PYS, "__next__"):
            inner = _producing(frames, i)
            if inner is None and _receiving(frames[i:]):
                inner = "transfer"
            return "wait", inner
        if _any_is(f, DATALOADER_PYS, "__iter__") or _any_is(f, DATALOADER_PYS, "_get_iterator"):
            return "epoch_start", None
        if any(_is(f, path, name) for path, name in RELAY_WAITS):
            return "wait", None  # the batch is taken from its workers in the relay thread: none of this thread's
    return "compute", None


def user_frame(frames: Sequence[Frame]) -> str | None:
    """The innermost frame outside Python's and the libraries' own files: where the user's code was, "file:line"."""
    for f in reversed(frames):
        if f.file and "site-packages" not in f.file and "/lib/python3" not in f.file and not f.file.startswith("<"):
            return f"{f.file}:{f.line} ({f.name})"
    return None
