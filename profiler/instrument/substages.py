"""Named sub-stages inside a sample: ``profiler.stage("tokenize")`` and the well-known library calls.

Inside a DataLoader worker, the profiler knows where each ``__getitem__`` starts and ends but not what the dataset
does in between. Two ways to name the parts:

- ``with profiler.stage("tokenize"): ...`` in the user's code (like ``torch.profiler.record_function``): a no-op
  costing one attribute check when nothing is being profiled.
- Library calls that mean the same thing in every dataset, named automatically while profiling: PIL ``Image.open``
  and the lazy ``ImageFile.load`` (decode), torchvision v1 ``Compose`` and v2 transforms (augment),
  ``torchvision.io`` decoders (decode) and ``read_file`` (read), ``torch.load`` and ``np.load`` (their own names).

Stages nest and are counted **exclusively** (self time): a lazy PIL decode triggered inside a transform is decode,
the rest of the transform is augment. Whatever no stage claims is the dataset's own code — stage ``getitem`` in the
record, never hidden. The kernel's view of the same time (on a core, waiting for a core, blocked) is measured for the
whole sample by ``clocks.snapshot``; sub-stages say *where*, the kernel split says *what kind*.
"""
from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable

_local = threading.local()
_clock = time.perf_counter_ns
# Stages entered on a thread with no sample open (the main loop's own, e.g. the built-in pipeline's h2d) go to this
# object's ``enter(name) -> token`` / ``exit(name, token)``; set by the session while it profiles.
main_hook: Any = None


def begin_sample() -> None:
    """Start collecting stage self-times (and decoded pixels) for one dataset call on this thread."""
    _local.acc = {}
    _local.stack = []
    _local.pixels = 0


def take_pixels() -> int:
    """Pixels of the images decoded during the last dataset call (PIL, torchvision.io): decode cost grows with them."""
    return int(getattr(_local, "pixels", 0) or 0)


def end_sample() -> dict[str, int]:
    """Stop collecting; ``{stage: self ns}`` of the call (stages still open are closed at this instant)."""
    acc = getattr(_local, "acc", None)
    _local.acc = None
    if acc is None:
        return {}
    stack = _local.stack
    now = _clock()
    while stack:  # an exception inside a stage left it open: close it here so its time is not lost
        name, t0, child = stack.pop()
        acc[name] = acc.get(name, 0) + (now - t0) - child
        if stack:
            stack[-1][2] += now - t0
    return acc


class stage:
    """``with profiler.stage("tokenize"):`` — name a part of your ``__getitem__`` (or of the main loop).

    Costs one thread-local lookup when nothing is being profiled. Nested stages count exclusively.
    """

    __slots__ = ("name", "_token", "_open")

    def __init__(self, name: str):
        self.name = str(name)
        self._open = 0  # 0: no-op, 1: sample stage, 2: main-loop stage

    def __enter__(self) -> "stage":
        if getattr(_local, "acc", None) is not None:
            _local.stack.append([self.name, _clock(), 0])
            self._open = 1
        elif main_hook is not None:
            self._token = main_hook.enter(self.name)
            self._open = 2
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._open == 1:
            stack = _local.stack
            if stack and stack[-1][0] == self.name:
                name, t0, child = stack.pop()
                dur = _clock() - t0
                acc = _local.acc
                if acc is not None:
                    acc[name] = acc.get(name, 0) + dur - child
                if stack:
                    stack[-1][2] += dur
        elif self._open == 2 and main_hook is not None:
            main_hook.exit(self.name, self._token)
        self._open = 0


def _pixels_of_self(args: tuple, result: Any) -> int:
    size = getattr(args[0], "size", None) if args else None  # PIL: (width, height) of the image being loaded
    return int(size[0]) * int(size[1]) if isinstance(size, tuple) and len(size) == 2 else 0


def _pixels_of_result(args: tuple, result: Any) -> int:
    shape = getattr(result, "shape", None)  # torchvision.io: a (C, H, W) tensor (or a list of them)
    return int(shape[-1]) * int(shape[-2]) if shape is not None and len(shape) >= 2 else 0


def _named(name: str, fn: Callable, pixels: Callable[[tuple, Any], int] | None = None) -> Callable:
    """Wrap a library function so calls made inside a sample count as stage ``name``; behaviour is unchanged."""
    if getattr(fn, "__profiler_stage__", None):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "acc", None) is None:
            return fn(*args, **kwargs)
        with stage(name):
            result = fn(*args, **kwargs)
        if pixels is not None:
            try:
                _local.pixels += pixels(args, result)
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
)
# Which wrapped calls count decoded pixels, and how.
_PIXELS = {"ImageFile.load": _pixels_of_self, "decode_image": _pixels_of_result, "decode_jpeg": _pixels_of_result,
           "decode_png": _pixels_of_result, "read_image": _pixels_of_result}
_patched: list[tuple[Any, str, Any]] = []
_lock = threading.Lock()


def install_library_stages() -> list[str]:
    """Wrap the library calls in LIBRARY_STAGES (idempotent); returns what could not be wrapped."""
    import importlib

    missing = []
    with _lock:
        if _patched:
            return missing
        for mod_name, path, name in LIBRARY_STAGES:
            try:
                owner: Any = importlib.import_module(mod_name)
                *outer, attr = path.split(".")
                for part in outer:
                    owner = getattr(owner, part)
                original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
            except Exception:  # noqa: BLE001 - an optional library or an API that moved: that stage stays unnamed
                missing.append(f"{mod_name}.{path}")
                continue
            setattr(owner, attr, _named(name, original, _PIXELS.get(path)))
            _patched.append((owner, attr, original))
    return missing


def uninstall_library_stages() -> None:
    with _lock:
        while _patched:
            owner, attr, original = _patched.pop()
            setattr(owner, attr, original)
