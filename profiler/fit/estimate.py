"""Will it fit? GPU memory of one training or inference step, from exact parameter counts and measured activations.

The step's memory is five parts, each computed the way it is best known:

- weights: exact, parameters x bytes of the precision, plus buffers (BatchNorm running statistics) because they live
  on the GPU too;
- gradients (train): one per trainable parameter, in the parameters' dtype (fp32 master weights under AMP);
- optimizer state (train): SGD 0, SGD+momentum 1, Adam/AdamW 2 tensors per parameter, in the parameters' dtype
  (``torch.optim`` allocates state with ``zeros_like(param)``, so pure bf16 training keeps bf16 state; under AMP the
  parameters and so the state are fp32);
- activations: measured (measure.py) as a line in batch size and scaled to the requested batch and precision;
- workspace: an allowance for what no tensor count sees (see ``CUDA_CONTEXT_BYTES`` and friends).

The sum assumes all parts coexist, which errs high: during backward, activations are freed while gradients appear.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

import torch

from profiler.errors import UserError
from profiler.fit.measure import ActivationMeasurement, DeviceOutOfMemory, measure_cpu, measure_cuda
from profiler.fit.options import MAX_IMAGE_SIZE, MODES, OPTIMIZER_STATES, PRECISIONS
from profiler.fit.sizes import MIB
from profiler.harness.models import NONE_MODEL, build_model, normalize_model_name

# Bytes per weight element. int8 = 1 byte per weight as in post-training quantisation; the per-channel scales and
# int32 biases of a real quantised model add well under 1 %.
PARAM_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}
# Activation bytes relative to fp32. Half precision halves every activation tensor. int8 inference keeps
# activations in int8 between quantised ops, ~1/4 of fp32; this is an approximation (quantise/dequantise stubs and
# fp32 accumulators at the edges add a little).
ACTIVATION_SCALE = {"fp32": 1.0, "bf16": 0.5, "fp16": 0.5, "int8": 0.25}
# Under AMP (autocast) convolutions and matmuls produce half-precision outputs, which dominate activation memory;
# the few ops autocast keeps in fp32 (softmax, losses, norms in some models) make the true factor a little higher.
AMP_ACTIVATION_SCALE = 0.5

# --- workspace allowance: what the caching allocator's tensor count does not see ---------------------------------
# CUDA context + PyTorch/cuDNN/cuBLAS kernel images: 300-600 MiB on current GPUs with lazy module loading
# (CUDA >= 11.7), more without it; it is outside torch.cuda.memory_allocated but inside the card's capacity.
CUDA_CONTEXT_BYTES = 512 * MIB
# cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG default :4096:8 = 32 MiB per stream, several streams) and the cuDNN
# convolution workspace picked by the algorithm heuristics (commonly tens to a few hundred MiB).
LIBRARY_WORKSPACE_BYTES = 256 * MIB
# The caching allocator rounds blocks up and splits them; reserved memory typically runs 5-15 % above allocated
# in steady training, so 10 % of the tensor bytes is allowed for fragmentation.
FRAGMENTATION_FRACTION = 0.10
# Reported as the largest batch when the measured activations do not grow with the batch at all (a degenerate
# measurement): a number far beyond any real batch rather than an infinity JSON cannot hold.
UNBOUNDED_BATCH = 1 << 20


@dataclass(frozen=True)
class ModelProfile:
    """Everything measured about one model at one image size and mode; precision and batch are applied later."""

    model: str
    mode: str
    image_size: int
    num_classes: int
    params: int
    trainable_params: int
    float_buffer_elems: int
    other_buffer_bytes: int
    leaf_modules: int
    activations: ActivationMeasurement


@dataclass
class MemoryBreakdown:
    """GPU memory of one step of ``model`` at ``batch_size``; all ``*_bytes`` are bytes, ``total_bytes`` their sum."""

    model: str
    batch_size: int
    mode: str
    precision: str
    amp: bool
    optimizer: str
    image_size: int
    params: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    activations_per_sample_bytes: int
    workspace_bytes: int
    total_bytes: int
    method: str
    activations_fixed_bytes: int = 0
    num_classes: int = 1000
    notes: list[str] = field(default_factory=list)
    profile: ModelProfile | None = None

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the nested profile included, so recommendations can be recomputed from it)."""
        return asdict(self)


def _check_options(batch_size: int, mode: str, precision: str, amp: bool, optimizer: str, image_size: int) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise UserError(f"batch size must be a positive integer, got {batch_size!r}")
    if mode not in MODES:
        raise UserError(f"unknown mode '{mode}': use train or infer")
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision '{precision}': use {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZER_STATES:
        raise UserError(f"unknown optimizer '{optimizer}': use {', '.join(OPTIMIZER_STATES)}")
    if precision == "int8" and mode == "train":
        raise UserError("int8 training is not supported: use --precision fp16/bf16 or --amp for training")
    if precision == "int8" and amp:
        raise UserError("--amp does not combine with int8: int8 is an inference-only weight format")
    if not isinstance(image_size, int) or image_size < 8 or image_size > MAX_IMAGE_SIZE:
        raise UserError(f"image size must be between 8 and {MAX_IMAGE_SIZE} px, got {image_size}")


def _resolve_device(device: str) -> str:
    """'cuda'/'cuda:i'/'auto' when a GPU is present, else 'cpu' (the estimate is still valid, just measured there)."""
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if device not in ("cpu", "auto") and match is None:
        raise UserError(f"unknown device '{device}': use cpu, cuda, cuda:N or auto")
    if device == "cpu" or not torch.cuda.is_available():
        return "cpu"
    if match is not None and match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise UserError(f"no device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return "cuda" if device == "auto" else device


@lru_cache(maxsize=32)
def _profile(model_name: str, mode: str, image_size: int, num_classes: int, device: str, precision: str,
             amp: bool) -> ModelProfile:
    """Build and measure once per key (the CPU key ignores precision/amp: it always measures fp32)."""
    model = build_model(model_name, num_classes=num_classes)
    assert model is not None
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    float_buf = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    other_buf = sum(b.numel() * b.element_size() for b in model.buffers() if not b.is_floating_point())
    leaves = sum(1 for m in model.modules() if not any(True for _ in m.children()))
    if device == "cpu":
        act = _measure_cpu(model, model_name, mode, image_size, num_classes)
    else:
        try:
            act = measure_cuda(model, model_name, mode, image_size, num_classes, precision, amp, device)
        except DeviceOutOfMemory as exc:
            # Not a broken model: this GPU had no room to measure (it may be smaller than the card asked about, or
            # in use). The CPU measures the same line; whether the step fits is then a fact compose() reports.
            act = _measure_cpu(model, model_name, mode, image_size, num_classes)
            act = replace(act, fallback=f"measured on the CPU because {device} ran {exc}")
    return ModelProfile(model_name, mode, image_size, num_classes, params, trainable, float_buf, other_buf,
                        leaves, act)


def _measure_cpu(model: torch.nn.Module, model_name: str, mode: str, image_size: int,
                 num_classes: int) -> ActivationMeasurement:
    try:
        return measure_cpu(model, model_name, mode, image_size, num_classes)
    except DeviceOutOfMemory as exc:
        raise UserError(f"measuring the activations of '{model_name}' needs more RAM than this machine has "
                        f"({exc}); try a smaller --image-size") from None


def _get_profile(model_name: str, mode: str, image_size: int, num_classes: int, device: str, precision: str,
                 amp: bool) -> ModelProfile:
    name = normalize_model_name(model_name)
    if name == NONE_MODEL:
        raise UserError("model 'none' has no GPU memory to estimate: give a model such as resnet50")
    dev = _resolve_device(device)
    if dev == "cpu":
        precision, amp = "fp32", False  # the CPU measurement is always fp32 and rescaled
    return _profile(name, mode, image_size, num_classes, dev, precision, amp)


def compose(profile: ModelProfile, batch_size: int, precision: str, amp: bool, optimizer: str) -> MemoryBreakdown:
    """The breakdown for one batch size and precision from a measured profile: arithmetic only, no forward."""
    train = profile.mode == "train"
    param_bytes = 4 if amp else PARAM_BYTES[precision]
    weights = (profile.params + profile.float_buffer_elems) * param_bytes + profile.other_buffer_bytes
    gradients = profile.trainable_params * param_bytes if train else 0
    opt_states = OPTIMIZER_STATES[optimizer] if train else 0
    optimizer_bytes = profile.trainable_params * param_bytes * opt_states
    act = profile.activations
    factor = (AMP_ACTIVATION_SCALE if amp else ACTIVATION_SCALE[precision]) / act.measured_scale
    per_sample = round(act.per_sample_bytes * factor)
    fixed = round(act.fixed_bytes * factor)
    notes = [f"weights include {profile.float_buffer_elems:,} buffer elements (BatchNorm running statistics)"]
    if act.fallback:
        notes.append(f"activations {act.fallback}")
    if amp:
        # autocast casts each conv/linear weight to half precision once per forward and keeps the copy for backward
        fixed += 2 * profile.params
        notes.append("AMP: fp32 master weights, gradients and optimizer state; half-precision weight copies "
                     "(2 bytes/param) counted with activations")
    if precision == "int8":
        notes.append("int8: 1 byte per weight, activations ~1/4 of fp32 (approximation)")
    if train and opt_states and not amp and precision in ("fp16", "bf16"):
        notes.append(f"optimizer state kept in {precision} like the parameters, as torch.optim does")
    activations = fixed + per_sample * batch_size
    tensors = weights + gradients + optimizer_bytes + activations
    workspace = CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES + int(FRAGMENTATION_FRACTION * tensors)
    return MemoryBreakdown(
        model=profile.model, batch_size=batch_size, mode=profile.mode, precision=precision, amp=amp,
        optimizer=optimizer if train else "none", image_size=profile.image_size, params=profile.params,
        weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer_bytes,
        activations_bytes=activations, activations_per_sample_bytes=per_sample, workspace_bytes=workspace,
        total_bytes=tensors + workspace, method=act.method, activations_fixed_bytes=fixed,
        num_classes=profile.num_classes, notes=notes, profile=profile,
    )


def estimate_memory(model_name: str, batch_size: int, mode: str = "train", precision: str = "fp32",
                    amp: bool = False, optimizer: str = "adam", image_size: int = 224, num_classes: int = 1000,
                    device: str = "cpu") -> MemoryBreakdown:
    """GPU memory of one ``mode`` step of ``model_name`` at ``batch_size`` (UserError on bad options)."""
    _check_options(batch_size, mode, precision, amp, optimizer, image_size)
    profile = _get_profile(model_name, mode, image_size, num_classes, device, precision, amp)
    return compose(profile, batch_size, precision, amp, optimizer)


def max_batch_from_profile(profile: ModelProfile, gpu_bytes: int, precision: str, amp: bool, optimizer: str) -> int:
    """Largest B with compose(B).total_bytes <= gpu_bytes: total is affine in B, so solve, then fix rounding."""
    at1 = compose(profile, 1, precision, amp, optimizer)
    if at1.total_bytes > gpu_bytes:
        return 0
    per_sample = at1.activations_per_sample_bytes * (1 + FRAGMENTATION_FRACTION)
    if per_sample <= 0:
        return UNBOUNDED_BATCH  # nothing measured grows with the batch
    batch = max(1, int((gpu_bytes - at1.total_bytes) / per_sample) + 1)
    while batch > 1 and compose(profile, batch, precision, amp, optimizer).total_bytes > gpu_bytes:
        batch -= 1
    while compose(profile, batch + 1, precision, amp, optimizer).total_bytes <= gpu_bytes:
        batch += 1
    return batch


def max_batch_size(model_name: str, gpu_bytes: int, mode: str = "train", precision: str = "fp32",
                   amp: bool = False, optimizer: str = "adam", image_size: int = 224, num_classes: int = 1000,
                   device: str = "cpu") -> int:
    """Largest batch size whose estimate fits in ``gpu_bytes`` (0 if even batch 1 does not)."""
    _check_options(1, mode, precision, amp, optimizer, image_size)
    profile = _get_profile(model_name, mode, image_size, num_classes, device, precision, amp)
    return max_batch_from_profile(profile, gpu_bytes, precision, amp, optimizer)


def breakdown_max_batch(breakdown: MemoryBreakdown, gpu_bytes: int) -> int:
    """:func:`max_batch_size` for the options of an existing breakdown (no new measurement)."""
    assert breakdown.profile is not None
    return max_batch_from_profile(breakdown.profile, gpu_bytes, breakdown.precision, breakdown.amp,
                      breakdown.optimizer if breakdown.mode == "train" else "sgd")

