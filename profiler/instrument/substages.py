"""Named sub-stages inside a sample: ``profiler.stage("tokenize")`` and the well-known library calls.

Inside a DataLoader worker, the profiler knows where each ``__getitem__`` starts and ends but not what the dataset
does in between. Two ways to name the parts:

- ``with profiler.stage("tokenize"): ...`` in the user's code (like ``torch.profiler.record_function``): a no-op
  costing one attribute check when nothing is being profiled.
- Library calls that mean the same thing in every dataset, named automatically while profiling: PIL ``Image.open``
  and the lazy ``ImageFile.load`` (decode), torchvision v1 ``Compose`` and v2 transforms (augment),
  ``torchvision.io`` decoders (decode) and ``read_file`` (read), ``torch.load`` and ``np.load`` (their own names);
  OpenCV ``cv2.imread`` / ``cv2.imdecode`` (decode), albumentations and MONAI ``Compose`` and each kornia
  augmentation called (augment), MONAI ``LoadImage`` (decode: it reads and decodes in one call, as PIL's
  ``Image.open`` + ``load`` do, so its time is decode).

Not named: ``np.memmap`` slicing. Slicing a memory map makes a view and reads nothing; the bytes are fetched by page
faults wherever the view's data is first touched (``.astype``, ``np.array``, ``torch.from_numpy(...)`` then a copy),
which no call boundary we could wrap encloses, and a wrapper on ``memmap.__getitem__`` (every index, in every
dataset) would time only the view's making. Those reads are not lost: the kernel counts the faults' device bytes
(read_bytes, per thread, around each batch), so their blocked time is ``io`` (``blocked_device``) and the storage
figures include them (analysis/io.py).

Stages nest and are counted **exclusively** (self time): a lazy PIL decode triggered inside a transform is decode,
the rest of the transform is augment. Whatever no stage claims is the dataset's own code — stage ``getitem`` in the
record, never hidden. The kernel's view of the same time (on a core, waiting for a core, blocked) is measured for the
whole sample by the clocks read around it (proxies.py, clocks.py); sub-stages say *where*, the kernel split says *what
kind*.
"""
from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any, Callable

_local = threading.local()
_clock = time.perf_counter_ns
# Stages entered on a thread with no sample open (the main loop's own, e.g. the built-in pipeline's h2d) go to this
# object's ``begin_main_stage(name) -> token`` / ``end_main_stage(name, token)``; set by the session while it profiles.
main_hook: Any = None


class SampleStages:
    """What the sub-stages saw during one batch's dataset calls on this thread, as flat event lists.

    Why per batch and flat: the per-call path must stay free of allocations, dict building and thread-local lookups
    (it runs for every sample; ~0.5 µs is its budget). A call does nothing here: a stage that closes appends one
    ``(row, name, self_ns)`` event, its row being the number of calls already recorded (``len(calls) // width``,
    the calls being ``width`` ints each: the open call's index); a decode appends ``(row, pixels)``. Stages that ran
    outside any call (in the collate) get the row after the last call, which no call has, and are dropped as before.
    The batch's columns are built from the events once, outside the hot path (``BatchMeta.stages``).
    """

    __slots__ = ("calls", "width", "stack", "events", "pixels")

    def __init__(self, calls: list[Any], width: int = 1) -> None:
        self.calls = calls  # the batch's recorded calls (proxies.Recorder): their count is the open call's row
        self.width = width  # list items per call
        self.stack: list[list[Any]] = []  # open stages: [name, start ns, children's ns]
        self.events: list[tuple[int, str, int]] = []  # (row, stage, self ns)
        self.pixels: list[tuple[int, int]] = []  # (row, decoded pixels)

    def row(self) -> int:
        """The open call's row: how many calls are already recorded (batch.CALL_FIELDS ints each)."""
        return len(self.calls) // self.width

    def close_open(self) -> None:
        """Close stages still open at the batch's end (a stage entered without ``with``): their time is not lost."""
        stack, now = self.stack, _clock()
        while stack:
            name, t0, child = stack.pop()
            self.events.append((self.row(), name, (now - t0) - child))
            if stack:
                stack[-1][2] += now - t0


def begin_batch(calls: list[Any], width: int = 1) -> SampleStages:
    """Start collecting stage self-times (and decoded pixels) for one batch's dataset calls on this thread (``calls``
    holds ``width`` items per call)."""
    smp = _local.sample = SampleStages(calls, width)
    return smp


def end_batch() -> None:
    smp = getattr(_local, "sample", None)
    if smp is not None and smp.stack:
        smp.close_open()
    _local.sample = None


def _open_sample() -> SampleStages | None:
    smp: SampleStages | None = getattr(_local, "sample", None)
    return smp


class stage:
    """``with profiler.stage("tokenize"):`` — name a part of your ``__getitem__`` (or of the main loop).

    Costs one thread-local lookup when nothing is being profiled. Nested stages count exclusively.
    """

    __slots__ = ("name", "_token", "_open")

    def __init__(self, name: str):
        self.name = str(name)
        self._open: SampleStages | int | None = None  # the sample's stages, 2: main-loop stage, None: no-op

    def __enter__(self) -> "stage":
        smp = _open_sample()
        if smp is not None:
            smp.stack.append([self.name, _clock(), 0])
            self._open = smp
        elif main_hook is not None:
            self._token = main_hook.begin_main_stage(self.name)
            self._open = 2
        return self

    def __exit__(self, *exc: Any) -> None:
        smp = self._open
        if isinstance(smp, SampleStages):
            stack = smp.stack
            if stack and stack[-1][0] == self.name:
                name, t0, child = stack.pop()
                dur = _clock() - t0
                smp.events.append((smp.row(), name, dur - child))
                if stack:
                    stack[-1][2] += dur
        elif smp == 2 and main_hook is not None:
            main_hook.end_main_stage(self.name, self._token)
        self._open = None


def _pixels_of_self(args: tuple, result: Any) -> int:
    size = getattr(args[0], "size", None) if args else None  # PIL: (width, height) of the image being loaded
    return int(size[0]) * int(size[1]) if isinstance(size, tuple) and len(size) == 2 else 0


def _pixels_of_result(args: tuple, result: Any) -> int:
    shape = getattr(result, "shape", None)  # torchvision.io: a (C, H, W) tensor (or a list of them)
    return int(shape[-1]) * int(shape[-2]) if shape is not None and len(shape) >= 2 else 0


def _pixels_of_hwc(args: tuple, result: Any) -> int:
    shape = getattr(result, "shape", None)  # OpenCV: an (H, W[, C]) array, or None when it could not decode
    return int(shape[0]) * int(shape[1]) if shape is not None and len(shape) >= 2 else 0


def _named(name: str, fn: Callable, pixels: Callable[[tuple, Any], int] | None = None) -> Callable:
    """Wrap a library function so calls made inside a sample count as stage ``name``; behaviour is unchanged."""
    if getattr(fn, "__profiler_stage__", None):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        smp = _open_sample()
        if smp is None:
            return fn(*args, **kwargs)
        with stage(name):
            result = fn(*args, **kwargs)
        if pixels is not None:
            try:
                n = pixels(args, result)
                if n:
                    smp.pixels.append((smp.row(), n))
            except Exception:  # noqa: BLE001 - a count for the report; never the user's problem
                pass
        return result

    wrapper.__profiler_stage__ = name  # type: ignore[attr-defined]
    wrapper.__wrapped_original__ = fn  # type: ignore[attr-defined]
    return wrapper


# (module, attribute path, stage name). Patched in every process that runs dataset code while profiling.
LIBRARY_STAGES: tuple[tuple[str, str, str], ...] = (
    ("PIL.Image", "open", "decode"),
    ("PIL.ImageFile", "ImageFile.load", "decode"),  # also counts the decoded pixels (see _PIXELS)
    ("torchvision.transforms", "Compose.__call__", "augment"),
    ("torchvision.transforms.v2", "Compose.forward", "augment"),
    ("torchvision.transforms.v2", "Transform.forward", "augment"),
    ("torchvision.io", "decode_image", "decode"),
    ("torchvision.io", "decode_jpeg", "decode"),
    ("torchvision.io", "decode_png", "decode"),
    ("torchvision.io", "read_image", "decode"),
    ("torchvision.io", "read_file", "read"),
    ("torch", "load", "torch.load"),
    ("numpy", "load", "np.load"),
    # OpenCV: module functions (a builtin each), looked up on the module at every call as cv2.imread(...).
    ("cv2", "imread", "decode"),
    ("cv2", "imdecode", "decode"),
    # albumentations: Compose (and ReplayCompose, which calls it). Not each transform: a stage costs ~2-7 us, and a
    # Compose of five transforms would pay it six times per sample (transforms called without Compose are unnamed,
    # as torchvision v1's are).
    ("albumentations", "Compose.__call__", "augment"),
    # kornia: every augmentation's call. Not its forward: kornia (0.9) gives each augmentation class its own clone of
    # _BasicAugmentationBase.forward (``__init_subclass__``, for torch.compile's caches), so a wrapper on the base's
    # forward was never called. The base has no ``__call__`` of its own (nn.Module's): one is set on it while
    # profiling (it runs the augmentation's forward, hooks and all) and deleted after (INHERITED).
    ("kornia.augmentation.base", "_BasicAugmentationBase.__call__", "augment"),
    # MONAI: Compose (monai.data.Dataset and CacheDataset call it); LoadImage reads and decodes.
    ("monai.transforms.compose", "Compose.__call__", "augment"),
    ("monai.transforms.io.array", "LoadImage.__call__", "decode"),
)
# Which wrapped calls count decoded pixels, and how.
_PIXELS = {"ImageFile.load": _pixels_of_self, "decode_image": _pixels_of_result, "decode_jpeg": _pixels_of_result,
           "decode_png": _pixels_of_result, "read_image": _pixels_of_result, "imread": _pixels_of_hwc,
           "imdecode": _pixels_of_hwc}
_patched: list[tuple[Any, str, Any]] = []
_lock = threading.Lock()
#: In _patched: the class had no attribute of its own (it inherited the one wrapped): deleted when put back.
INHERITED: Any = object()


# LIBRARY_STAGES entries not wrapped yet because their module is not imported, and len(sys.modules) when that was
# last looked at (wrap_imported).
_waiting: list[tuple[str, str, str]] = []
_modules_seen = 0


def install_library_stages() -> list[str]:
    """Wrap the library calls in LIBRARY_STAGES whose module the process has imported (idempotent); the others are
    wrapped by :func:`wrap_imported` once the job imports them. Returns what could not be wrapped.

    Why not import them: the profiler must not change what the job's process holds. Importing torchvision for a job
    that never uses it took 1.8 s and ~160k objects (sympy, triton, torch.onnx, every torchvision model) at the start
    of the block, and the garbage collector's first full pass over them then fell inside the measured steps."""
    global _modules_seen
    with _lock:
        if _patched or _waiting:
            return []
        _waiting.extend(LIBRARY_STAGES)
        _modules_seen = -1
    return wrap_imported()


def wrap_imported() -> list[str]:
    """Wrap the waiting library calls whose module the process has imported by now (fetch.py calls it once per batch
    while some wait and ``len(sys.modules)`` has changed since the last look)."""
    global _modules_seen
    missing: list[str] = []
    with _lock:
        _modules_seen = len(sys.modules)
        for entry in list(_waiting):
            mod_name, path, name = entry
            module = sys.modules.get(mod_name)
            if module is None:
                continue
            _waiting.remove(entry)
            try:
                owner: Any = module
                *outer, attr = path.split(".")
                for part in outer:
                    owner = getattr(owner, part)
                own = owner.__dict__.get(attr, INHERITED) if isinstance(owner, type) else getattr(owner, attr)
                # A dunder the class inherits (kornia's __call__, nn.Module's): the inherited one is wrapped on it.
                original = getattr(owner, attr) if own is INHERITED and attr.startswith("__") else \
                    owner.__dict__[attr] if own is INHERITED else own
            except Exception:  # noqa: BLE001 - an API that moved: that stage stays unnamed
                missing.append(f"{mod_name}.{path}")
                continue
            setattr(owner, attr, _named(name, original, _PIXELS.get(path)))
            _patched.append((owner, attr, own))
    return missing


def uninstall_library_stages() -> None:
    with _lock:
        _waiting.clear()
        while _patched:
            owner, attr, original = _patched.pop()
            if original is INHERITED:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
