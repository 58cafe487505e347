"""Measure how activation memory grows with batch size, by running the real model at two small batch sizes.

Why measure instead of a formula: activation memory depends on what each op keeps for backward (a ReLU done in place
keeps one tensor where an out-of-place one keeps two; BatchNorm keeps its input; attention keeps its score matrix),
and that is only known by running the ops. Two batch sizes give a line ``bytes = fixed + per_sample * B``: every
activation tensor has the batch as its first dimension, so the line is exact up to the few per-channel tensors that
make ``fixed``, and it extends to any batch size without running it.

- CPU, train: bytes of the tensors autograd saves for backward, seen through the public
  ``torch.autograd.graph.saved_tensors_hooks``, counted once per storage (views and in-place results share one) and
  without parameters and buffers (counted as weights). No backward pass is run: every saved tensor exists by the end
  of the forward; backward then frees them layer by layer while it allocates parameter gradients (counted separately
  by the estimator, so the sum errs high) and, for the layer it is working on, the gradients of that layer's output
  and input: two buffers the size of the largest saved tensor are added for those.
- CPU, infer: nothing is saved under ``torch.no_grad``; the peak is the largest set of tensors alive at once. Forward
  pre/post hooks on every module see each module's inputs and outputs; weak references tell which are still alive,
  so the peak is the largest sum of distinct live storages seen at any hook (e.g. a residual block's identity plus
  its two intermediate maps).
- CUDA: ``torch.cuda.max_memory_allocated`` over the forward, in the real precision (and autocast for AMP); this
  also sees what hooks cannot (temporary buffers inside ops, cuDNN workspace allocated through PyTorch).
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from profiler.errors import UserError
from profiler.harness.models import primary_output

# Batch sizes for the two CPU runs. Train starts at 2 because BatchNorm in train mode rejects a batch of 1 once the
# feature map is 1x1 (one value per channel); infer can use 1. Both are small so a resnet50 at 224 px costs ~1 s.
CPU_TRAIN_BATCHES = (2, 4)
CPU_INFER_BATCHES = (1, 2)
# On a GPU the runs are cheap; larger batches make allocator rounding and cuDNN workspace a smaller share of the
# difference, so the per-sample slope is steadier.
CUDA_BATCHES = (8, 16)

# Activation-gradient buffers alive at the peak of backward (grad_output and grad_input of one layer), counted in
# units of the largest saved tensor; see _saved_bytes.
BACKWARD_GRAD_BUFFERS = 2

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.float16}


class DeviceOutOfMemory(Exception):
    """The device ran out of memory while fit measured on it (a fact about that device, not a broken model)."""


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a CUDA (or CPU allocator) out-of-memory error: ``torch.OutOfMemoryError`` (torch >= 1.13), or a
    RuntimeError whose message says so, as older torch and cuDNN/cuBLAS failures raise it."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


@dataclass(frozen=True)
class ActivationMeasurement:
    """The measured line ``bytes(B) = fixed_bytes + per_sample_bytes * B`` and how it was obtained."""

    per_sample_bytes: int
    fixed_bytes: int
    batch_sizes: tuple[int, int]
    bytes_measured: tuple[int, int]
    # Activation bytes per element relative to fp32 at which this was measured (1.0 for fp32 on the CPU, 0.5 for a
    # CUDA fp16/bf16/AMP run); the estimator rescales to the requested precision with it.
    measured_scale: float
    method: str
    # Why this was not measured where asked (e.g. the GPU ran out of memory, so the CPU measured); "" when it was.
    fallback: str = ""


def net_line(points: list[tuple[int, int, int]]) -> tuple[int, int]:
    """``(per_sample, fixed)`` bytes of the line through ``(batch, peak, baseline)`` measurements, net of baseline.

    Why net: each peak includes whatever was allocated before that measurement began (weights, gradients, the cuBLAS
    workspace a first matmul creates and keeps); only ``peak - baseline`` grows with the batch. Two points give the
    line exactly; more are fitted by least squares. The slope is never negative and the intercept never below 0.
    """
    if len(points) < 2 or len({b for b, _, _ in points}) < 2:
        raise ValueError("net_line needs measurements at two different batch sizes")
    xs = [float(b) for b, _, _ in points]
    ys = [float(max(0, peak - base)) for _, peak, base in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    slope = max(0.0, slope)
    return round(slope), max(0, round(my - slope * mx))


@dataclass
class MemoryProbe:
    """How :func:`measure_line` reads a device's allocator: callables, so the protocol is testable without one."""

    allocated: Callable[[], int]  # bytes allocated now
    peak: Callable[[], int]  # bytes at the peak since the last reset
    reset_peak: Callable[[], None]
    sync: Callable[[], None]


def measure_line(step: Callable[[int], None], batches: tuple[int, ...], probe: MemoryProbe,
                 warmup: bool = True) -> list[tuple[int, int, int]]:
    """Run ``step(batch)`` once per batch size and return ``(batch, peak, baseline)`` for each.

    With ``warmup``, one step at the smallest batch runs first and is not measured: a fresh process creates the cuBLAS
    workspace (32 MiB on Hopper), cuDNN handles and the parameters' ``.grad`` tensors in its first step and keeps
    them, which would otherwise land inside the first measurement but in the second one's baseline, and pull the
    per-sample slope down by that constant over the batch difference.
    """
    if warmup:
        step(min(batches))
        probe.sync()
    points = []
    for batch in batches:
        probe.sync()
        base = probe.allocated()
        probe.reset_peak()
        step(batch)
        probe.sync()
        points.append((batch, probe.peak(), base))
    return points


def _line(batches: tuple[int, int], measured: tuple[int, int]) -> tuple[int, int]:
    return net_line([(batches[0], measured[0], 0), (batches[1], measured[1], 0)])


def _frozen_storages(model: nn.Module) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}


def _run_forward(model: nn.Module, batch: int, image_size: int, num_classes: int, train: bool,
                 device: torch.device, dtype: torch.dtype, autocast_dtype: torch.dtype | None,
                 model_name: str, backward: bool = False) -> None:
    """One forward (and loss; with ``backward`` also the backward) at ``batch``.

    Out of memory raises DeviceOutOfMemory, raised after the except block so that no traceback (whose frames hold
    the batch and its activations) outlives this call; any other failure of the model is a UserError.
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    grad_ctx = torch.enable_grad() if train else torch.no_grad()
    amp_ctx = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None else nullcontext()
    failure: str | None = None
    oom = False
    # Optional: each is dropped (set to None) below, before the caller frees the cache.
    x: torch.Tensor | None
    target: torch.Tensor | None
    out: torch.Tensor | None
    loss: torch.Tensor | None = None
    try:
        x = torch.randn(batch, 3, image_size, image_size, generator=gen).to(device=device, dtype=dtype)
        target = torch.randint(0, num_classes, (batch,), generator=gen).to(device)
        with grad_ctx, amp_ctx:
            out = primary_output(model(x))
            if train:
                loss = F.cross_entropy(out.float(), target)
        if train and backward and loss is not None:
            loss.backward()
    except (RuntimeError, ValueError, AssertionError) as exc:
        oom = is_out_of_memory(exc)
        failure = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if failure is None:
        return
    x = target = out = loss = None  # (drop the batch before the caller frees the cache)
    if oom:
        raise DeviceOutOfMemory(f"out of memory at batch {batch}, {image_size} px on {device}: {failure}")
    raise UserError(f"model '{model_name}' cannot run on {image_size}px images: {failure}")


def measure_cpu(model: nn.Module, model_name: str, mode: str, image_size: int,
                num_classes: int) -> ActivationMeasurement:
    """Activation line of ``model`` (fp32, on the CPU) for ``mode`` 'train' or 'infer'; see the module docstring."""
    train = mode == "train"
    model = model.to("cpu", dtype=torch.float32).train(train)
    frozen = _frozen_storages(model)
    batches = CPU_TRAIN_BATCHES if train else CPU_INFER_BATCHES
    measured = []
    for batch in batches:
        if train:
            measured.append(_saved_bytes(model, batch, image_size, num_classes, frozen, model_name))
        else:
            measured.append(_live_peak_bytes(model, batch, image_size, num_classes, frozen, model_name))
    per_sample, fixed = _line(batches, (measured[0], measured[1]))
    if train:
        method = (f"cpu-saved-tensors: bytes autograd saves for backward (saved_tensors_hooks, one count per storage, "
                  f"parameters excluded) + {BACKWARD_GRAD_BUFFERS} gradient buffers of the largest one, at batch "
                  f"{batches[0]} and {batches[1]} in fp32, extended linearly in batch")
    else:
        method = (f"cpu-live-peak: largest sum of live module inputs/outputs (forward hooks) at batch {batches[0]} "
                  f"and {batches[1]} in fp32, extended linearly in batch; temporaries inside a module are not seen")
    return ActivationMeasurement(per_sample, fixed, batches, (measured[0], measured[1]), 1.0, method)


def _saved_bytes(model: nn.Module, batch: int, image_size: int, num_classes: int, frozen: set[int],
                 model_name: str) -> int:
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse/nested tensors have no plain storage
            return t
        ptr = storage.data_ptr()
        if ptr and ptr not in frozen:
            seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _run_forward(model, batch, image_size, num_classes, True, torch.device("cpu"), torch.float32, None,
                     model_name)
    # Backward frees saved tensors as it goes but, at the layer it is working on, holds the gradient of that
    # layer's output and the gradient of its input at once: at most two buffers the size of the largest saved
    # activation on top of what is still saved.
    return sum(seen.values()) + BACKWARD_GRAD_BUFFERS * max(seen.values(), default=0)


def _live_peak_bytes(model: nn.Module, batch: int, image_size: int, num_classes: int, frozen: set[int],
                     model_name: str) -> int:
    live: dict[int, tuple[weakref.ref, int]] = {}
    peak = 0

    def note(*objs: object) -> None:
        nonlocal peak
        for obj in objs:
            tensors = obj if isinstance(obj, (tuple, list)) else (obj,)
            for t in tensors:
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if not ptr or ptr in frozen:
                    continue
                old = live.get(ptr)
                if old is None or old[0]() is None:  # a freed storage's address can be reused by a new one
                    live[ptr] = (weakref.ref(t), storage.nbytes())
        for ptr in [p for p, (ref, _) in live.items() if ref() is None]:
            del live[ptr]
        peak = max(peak, sum(n for _, n in live.values()))

    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(lambda _m, inp: note(inp)))
        handles.append(module.register_forward_hook(lambda _m, inp, out: note(inp, out)))
    try:
        _run_forward(model, batch, image_size, num_classes, False, torch.device("cpu"), torch.float32, None,
                     model_name)
    finally:
        for handle in handles:
            handle.remove()
    return peak


def measure_cuda(model: nn.Module, model_name: str, mode: str, image_size: int, num_classes: int,
                 precision: str, amp: bool, device: str = "cuda") -> ActivationMeasurement:
    """Activation line from ``torch.cuda.max_memory_allocated`` over a real step, net of what was allocated before it.

    Train runs forward + backward (the peak of a step is early in backward, where saved activations and their
    gradients coexist); the parameters' ``.grad`` tensors exist from the warm-up step on, so they sit in the baseline
    and are not counted twice (the estimator counts gradients separately). Infer runs the forward under no_grad.
    See :func:`measure_line` for the warm-up and the baseline.

    int8 is run as fp16 (PyTorch has no generic int8 CUDA path for these models) and reported with scale 0.5, which
    the estimator halves again. With AMP the fp16 copies of the weights that autocast keeps for backward are in the
    measured peak; they are subtracted from ``fixed`` here because the estimator adds them back analytically.
    Raises DeviceOutOfMemory when the device cannot hold the model or the measured steps.
    """
    dev = torch.device(device)
    train = mode == "train"
    dtype = torch.float32 if amp else _DTYPES[precision]
    autocast_dtype = (torch.bfloat16 if precision == "bf16" else torch.float16) if amp else None
    probe = MemoryProbe(allocated=lambda: int(torch.cuda.memory_allocated(dev)),
                        peak=lambda: int(torch.cuda.max_memory_allocated(dev)),
                        reset_peak=lambda: torch.cuda.reset_peak_memory_stats(dev),
                        sync=lambda: torch.cuda.synchronize(dev))

    def step(batch: int) -> None:
        _run_forward(model, batch, image_size, num_classes, train, dev, dtype, autocast_dtype, model_name,
                     backward=True)

    failure: str | None = None
    try:
        with torch.cuda.device(dev):
            model.to(dev, dtype=dtype).train(train)
            points = measure_line(step, CUDA_BATCHES, probe)
    except DeviceOutOfMemory as exc:
        failure = str(exc)
    except RuntimeError as exc:  # model.to() itself: the weights do not fit
        if not is_out_of_memory(exc):
            raise
        failure = f"out of memory moving the weights to {dev}: " + str(exc).strip().splitlines()[0]
    finally:
        model.zero_grad(set_to_none=True)
        model.to("cpu", dtype=torch.float32)
        torch.cuda.empty_cache()
    if failure is not None:
        raise DeviceOutOfMemory(failure)
    per_sample, fixed = net_line(points)
    if amp:
        fixed = max(0, fixed - 2 * sum(p.numel() for p in model.parameters()))
    scale = 1.0 if (dtype == torch.float32 and not amp) else 0.5
    name = torch.cuda.get_device_name(dev)
    label = precision + ("+amp" if amp else "") + (" (run as fp16)" if precision == "int8" else "")
    what = "forward + backward" if train else "forward"
    method = (f"cuda-peak: torch.cuda.max_memory_allocated over a {what} on {name}, net of the memory allocated "
              f"before it, at batch {CUDA_BATCHES[0]} and {CUDA_BATCHES[1]} after one warm-up step, in {label}, "
              "extended linearly in batch")
    return ActivationMeasurement(per_sample, fixed, CUDA_BATCHES, (points[0][1] - points[0][2],
                                                                   points[1][1] - points[1][2]), scale, method)
