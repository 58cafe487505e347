"""Which loader a job trains from, what a batch holds, and where in the user's code a loader was made or iterated.

A job iterates several DataLoaders: Lightning's sanity check runs two validation batches before training, a script
takes one batch to infer shapes, a validation pass follows each epoch. The Session (session.py) watches them all and
asks this module three questions:

- ``LoaderSelector``: does this loader match what the user named with ``--loader`` / ``loader=``?
- ``count_samples``: how many samples does this batch hold? The leading dimension of its tensors (through tuples,
  lists, dicts, dataclasses and objects with tensor attributes), because ``batch_size`` is wrong for a batching
  dataset (``batch_size=None``, webdataset's ``.batched()``), for ``__getitems__`` and for a short last batch.
- ``call_sites``: the first frame in the user's own code, and the library frame that actually called torch — a
  loader made inside ``timm.create_loader`` was made *by* the user's line that called ``create_loader``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor as _Tensor

# How deep count_samples looks into a batch (a dict of tuples of tensors is depth 2) and how many objects it visits
# at most: real batches hold their tensors within 3 levels, and the walk runs once per step on the main thread, so
# it must stay a few microseconds however odd the batch.
MAX_DEPTH = 4
MAX_VISITS = 64
# Batches whose tensor bytes are weighed for job.loader.batch_bytes: the first few say a batch's size (a loader's
# batches are one shape but for a short last one), and walking each batch would cost the job on every step.
BATCH_BYTES_OF = 8

# Bases of a step's sample count, best first (job.loader.samples_basis in run.json).
BASIS_BATCH = "batch"  # the leading dimension of the batch's tensors
BASIS_LENGTH = "batch length"  # a list of uncollated samples: its length
BASIS_CALLS = "dataset calls"  # no tensors in the batch: samples the dataset calls returned
BASIS_STEP = "one per step"  # nothing to count: one sample per step (the record says so)


def _per_sample_list(obj: list[Any] | tuple[Any, ...], batch_size: int | None) -> bool:
    """A list as long as ``batch_size`` of array-likes of one shape whose leading dimension is not ``batch_size``: one
    tensor per sample (a batch object holding ``[x0, x1, ...]``), counted by its length. Without it a list of 16
    per-sample ``[8]`` tensors counted 8. Only with ``batch_size``: without it such a list cannot be told from a
    collated list of views (multi-crop: a few ``[B, C, H, W]`` tensors)."""
    if batch_size is None or batch_size < 2 or len(obj) != batch_size:
        return False
    first = None
    for e in obj[:MAX_VISITS]:
        shape = getattr(e, "shape", None)
        if shape is None or isinstance(e, type):
            return False
        try:
            t = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            return False
        if not t or (first is not None and t != first):
            return False
        first = t
    return first is not None and first[0] != batch_size


def _leading_dims(obj: Any, depth: int, out: list[int], budget: list[int], batch_size: int | None = None) -> None:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return
    shape = getattr(obj, "shape", None)
    if shape is not None and not isinstance(obj, type):  # torch.Tensor, numpy arrays, anything array-like
        try:
            if len(shape) >= 1:
                out.append(int(shape[0]))
        except TypeError:
            pass
        return
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return
    if isinstance(obj, Mapping):
        children: Any = obj.values()
    elif isinstance(obj, (list, tuple)):
        if depth and _per_sample_list(obj, batch_size):
            out.append(len(obj))
            return
        children = obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        children = [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__") and not callable(obj):
        children = vars(obj).values()
    else:
        return
    for child in children:
        if budget[0] < 0:
            return
        _leading_dims(child, depth + 1, out, budget, batch_size)


def count_samples(batch: Any, batch_size: int | None = None) -> tuple[int, str] | None:
    """(samples in ``batch``, basis), or None when the batch itself does not say, or says what cannot be trusted.

    The most common leading dimension of the batch's tensors is the batch's size (an image batch ``[B, C, H, W]``
    beside labels ``[B]``; a tokenizer's ``input_ids``/``attention_mask``/``labels``, all ``[B, L]``). A plain list
    of uncollated samples (``collate_fn=lambda b: b``) counts by its length, and so does a list of per-sample tensors
    inside a batch object (``_per_sample_list``); ``batch_size`` only breaks the tie of a list of same-shaped tensors,
    which is either a collated ``(x, y)`` pair or a list of samples. A count under 1 (an array-like whose ``shape`` is
    ``(-1, 8)`` gave -1 samples a step, a negative throughput and a run.json ``report`` refused) is not a count: None,
    and the caller counts by the dataset's calls and records that basis.
    """
    n = _count(batch, batch_size)
    return n if n is None or n[0] >= 1 else None


def _count(batch: Any, batch_size: int | None) -> tuple[int, str] | None:
    try:  # a batch type that fails to say its shape (a lazy batch whose build failed) is not the job's error
        cls = batch.__class__
        if (cls is list or cls is tuple) and len(batch) == 2 and batch_size != 2:
            # The commonest batch of all, (x, y) of tensors, with the fewest steps (this runs once per step).
            x, y = batch
            if x.__class__ is _Tensor and y.__class__ is _Tensor:
                sx, sy = x.shape, y.shape
                if sx and sy and sx[0] == sy[0]:
                    return int(sx[0]), BASIS_BATCH
        if (cls is tuple or cls is list) and len(batch) != batch_size and 0 < len(batch) <= MAX_VISITS:
            # The common collated batch, (x, y) of tensors (default_collate makes it a list), counted without the walk
            # (the same answer, once per step); a list as long as batch_size may be uncollated samples: judged below.
            first = -1
            for e in batch:
                shape = e.shape if e.__class__ is _Tensor else None
                if shape is None or not len(shape) or (first >= 0 and shape[0] != first):
                    break
                first = shape[0]
            else:
                return int(first), BASIS_BATCH
        if isinstance(batch, (list, tuple)) and batch:
            head = batch[:MAX_VISITS]  # bounded: a list of 100k uncollated samples is judged by its first ones
            is_list = isinstance(batch, list)
            if is_list and all(isinstance(e, (Mapping, tuple, list)) for e in head) and \
                    len({type(e) for e in head}) == 1:
                return len(batch), BASIS_LENGTH
            if not is_list and _per_sample_list(batch, batch_size):  # a tuple of per-sample tensors
                return len(batch), BASIS_LENGTH
            if is_list and batch_size is not None and len(batch) == batch_size:
                firsts: list[int] = []
                for e in batch[:MAX_VISITS]:
                    _leading_dims(e, MAX_DEPTH, firsts, [1])
                if len(firsts) == len(batch) and any(d != batch_size for d in firsts):
                    return len(batch), BASIS_LENGTH
        dims: list[int] = []
        _leading_dims(batch, 0, dims, [MAX_VISITS], batch_size)
        if not dims:
            return None
        counts: dict[int, int] = {}
        for d in dims:
            counts[d] = counts.get(d, 0) + 1
        best = max(counts.values())
        return next(d for d in dims if counts[d] == best), BASIS_BATCH
    except Exception:  # noqa: BLE001 - counted on another basis by the caller
        return None


# --- where in the user's code ------------------------------------------------------------------------------------
_PROFILER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_dirs() -> tuple[str, ...]:
    """Folders that hold the interpreter's and installed packages' code: never the user's own."""
    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    return tuple(sorted(os.path.abspath(d) + os.sep for d in dirs if d))


_LIBRARY_DIRS = _library_dirs()


def is_library_file(filename: str) -> bool:
    """Code that is not the user's: the standard library, site-packages, frozen modules, or the profiler itself."""
    if filename.startswith("<"):  # <frozen runpy>, <string>
        return True
    fn = os.path.abspath(filename)
    return fn.startswith(_LIBRARY_DIRS) or fn.startswith(_PROFILER_DIR + os.sep) or fn == _PROFILER_DIR


# Kernel interfaces, never a job's data: with num_workers=0 the fetch runs on the main thread while the profiler's own
# sampler thread (and psutil in libraries) read /proc, and the open audit event does not say which thread opened.
PSEUDO_FILESYSTEMS = ("proc", "sys", "dev")


def is_data_folder(folder: str) -> bool:
    """A folder worth naming as where the job's data came from: not bytecode caches, not the interpreter's or an
    installed package's files (a library reading its own resources while a sample is made), not the profiler's."""
    parts = folder.split(os.sep)
    if len(parts) > 1 and parts[1] in PSEUDO_FILESYSTEMS:
        return False
    return "__pycache__" not in parts and not is_library_file(os.path.join(folder, "_"))


def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def call_sites(skip: int = 1) -> tuple[str | None, str | None]:
    """(user site, library site) of the caller's stack as "file:line".

    The user site is the innermost frame in the user's own code (outside the standard library, site-packages and
    the profiler); the library site the innermost frame outside torch and the profiler — the line that actually made
    or iterated the loader. The second is None when both are the same line (the user's code called torch itself).
    """
    torch_dir = _torch_dir()
    f: Any = sys._getframe(skip + 1)
    user = lib = None
    while f is not None and user is None:
        fn = f.f_code.co_filename
        site = f"{fn}:{f.f_lineno}"
        absfn = os.path.abspath(fn)
        if lib is None and not absfn.startswith(torch_dir) and not absfn.startswith(_PROFILER_DIR + os.sep) \
                and not fn.endswith(("runpy.py", "contextlib.py")) and not fn.startswith("<"):
            lib = site
        if not is_library_file(fn):
            user = site
        f = f.f_back
    return (user or lib), (lib if lib != user and user is not None else None)


# --- --loader ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoaderSelector:
    """A loader named by the user: ``CLASS``, ``FILE:LINE`` or ``CLASS@FILE:LINE``.

    ``CLASS`` matches the dataset's class by name or by a dotted suffix of its full name (``MyData``,
    ``mypkg.data.MyData``); ``FILE:LINE`` matches where the loader was created, the file by path suffix
    (``train.py:42`` matches ``/home/me/proj/train.py:42``), the user's line or the library's.
    """
    dataset_class: str | None
    site: str | None

    @staticmethod
    def parse(spec: str) -> "LoaderSelector":
        from ..errors import UserError

        spec = spec.strip()
        cls, _, site = spec.partition("@") if "@" in spec else ("", "", spec)
        if not cls and site:
            head, sep, line = site.rpartition(":")
            if not (sep and head and line.isdigit()):  # no FILE:LINE form: a class name
                cls, site = site, ""
        if site:
            head, sep, line = site.rpartition(":")
            if not (sep and head and line.isdigit()):
                raise UserError(f"--loader {spec}: expected CLASS, FILE:LINE or CLASS@FILE:LINE")
        if not cls and not site:
            raise UserError("--loader: empty; expected CLASS, FILE:LINE or CLASS@FILE:LINE")
        return LoaderSelector(cls or None, site or None)

    def matches(self, dataset_class: str, sites: tuple[str | None, ...]) -> bool:
        if self.dataset_class is not None:
            want = self.dataset_class
            if dataset_class != want and not dataset_class.endswith("." + want):
                return False
        if self.site is not None:
            file, _, line = self.site.rpartition(":")
            ok = False
            for s in sites:
                if s is None:
                    continue
                sf, _, sl = s.rpartition(":")
                if sl == line and (sf == file or os.path.abspath(sf).endswith(os.sep + file.lstrip(os.sep))
                                   or os.path.abspath(sf) == os.path.abspath(file)):
                    ok = True
            if not ok:
                return False
        return True

    def __str__(self) -> str:
        return "@".join(p for p in (self.dataset_class, self.site) if p)


def epoch_length(loader: Any) -> int | None:
    """Batches in one epoch of ``loader``, or None when it cannot say (an IterableDataset without ``__len__``)."""
    try:
        return int(len(loader))
    except Exception:  # noqa: BLE001 - TypeError for iterables; a user's __len__ may raise anything
        return None


def tensor_bytes(batch: Any) -> int | None:
    """Bytes of the tensors (and numpy arrays) a batch holds, through tuples, lists, dicts and objects' attributes;
    None when it holds none or cannot be walked.

    What the transfer advice weighs against the time a batch took to reach the main process: 2 KB cannot take 20 ms
    to move through shared memory, so a slow hand-off of a small batch is the main process waiting for a core, not
    bytes (issue 31 item 10). Bounded like the sample count (MAX_VISITS objects), and called on a few batches only.
    """
    total, seen, stack, visits = 0, False, [batch], 0
    try:
        while stack and visits < MAX_VISITS * 4:
            e = stack.pop()
            visits += 1
            if isinstance(e, _Tensor):
                total += int(e.nelement()) * int(e.element_size())
                seen = True
            elif type(e).__module__ == "numpy" and hasattr(e, "nbytes") and hasattr(e, "shape"):
                total += int(e.nbytes)
                seen = True
            elif isinstance(e, (list, tuple)):
                stack.extend(e[:MAX_VISITS])
            elif isinstance(e, Mapping):
                stack.extend(list(e.values())[:MAX_VISITS])
            elif hasattr(e, "__dict__") and not isinstance(e, type):
                stack.extend(list(vars(e).values())[:MAX_VISITS])
    except Exception:  # noqa: BLE001 - a user's batch object may raise anything from its attributes
        return None
    return total if seen else None

