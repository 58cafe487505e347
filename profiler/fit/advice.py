"""What to change when a step does not fit: each option recomputed from the measured profile, never guessed.

Every recommendation re-runs the estimator's arithmetic (``compose``) under the changed option, so its
``expected_gain`` is the same model of memory the breakdown uses, and says whether the result would then fit.
"""
from __future__ import annotations

import dataclasses
import math
import re
from functools import lru_cache

import torch

from profiler.errors import UserError
from profiler.fit.estimate import MemoryBreakdown, ModelProfile, compose, max_batch_from_profile
from profiler.fit.measure import ActivationMeasurement
from profiler.fit.sizes import format_bytes
from profiler.harness.models import build_model, model_names

# Gradient checkpointing with sqrt(L) segments keeps ~2*sqrt(L)/L of the activations (Chen et al. 2016, "Training
# deep nets with sublinear memory cost") when the L layers are equal in size. Real CNNs put most activation bytes in
# the early high-resolution layers, and per-block checkpointing of a ResNet saves roughly 50-70 %, so the factor is
# never taken below this floor.
CHECKPOINT_MIN_FACTOR = 0.35
# Recomputing the forward during backward costs about one extra forward: ~1/3 more compute per training step.
CHECKPOINT_COMPUTE_COST = "~30 % more compute per step (one extra forward pass)"
# A smaller model is worth suggesting when parameters + gradients + optimizer state are at least this share of the
# step (below it, activations dominate and batch/precision/checkpointing are the better levers), or when not even
# batch 1 fits.
SMALLER_MODEL_PARAM_SHARE = 0.25
# Small, widely used fallbacks when the model is already the smallest of its family.
FALLBACK_SMALL_MODELS = ("mobilenet_v3_large", "mobilenet_v3_small")


def _as_breakdown(breakdown: MemoryBreakdown | dict) -> MemoryBreakdown:
    """Accept the dataclass or its ``to_dict()`` form (e.g. read back from a JSON report)."""
    if isinstance(breakdown, MemoryBreakdown):
        if breakdown.profile is None:
            raise UserError("this memory breakdown carries no measured profile; re-run the estimate")
        return breakdown
    prof = dict(breakdown.get("profile") or {})
    if not prof:
        raise UserError("this memory breakdown carries no measured profile; re-run the estimate")
    act = dict(prof["activations"])
    act["batch_sizes"] = tuple(act["batch_sizes"])
    act["bytes_measured"] = tuple(act["bytes_measured"])
    prof["activations"] = ActivationMeasurement(**act)
    names = {f.name for f in dataclasses.fields(MemoryBreakdown)} - {"profile"}
    return MemoryBreakdown(**{k: v for k, v in breakdown.items() if k in names}, profile=ModelProfile(**prof))


def _opt(bd: MemoryBreakdown) -> str:
    return bd.optimizer if bd.mode == "train" else "sgd"


@lru_cache(maxsize=256)
def _param_count(name: str, num_classes: int) -> int:
    """Parameter count from a model built on the meta device: shapes only, no memory, milliseconds."""
    with torch.device("meta"):
        model = build_model(name, num_classes=num_classes)
    return sum(p.numel() for p in model.parameters()) if model is not None else 0


def _smaller_model(name: str, params: int, num_classes: int) -> tuple[str, int] | None:
    """The largest model of the same family (same leading letters: resnet, efficientnet, vit...) with fewer
    parameters, else a small mobile model; None when nothing smaller is known."""
    family = re.match(r"[a-z]+", name)
    siblings = [n for n in model_names()[2:]
                if family and (m := re.match(r"[a-z]+", n)) and m.group(0) == family.group(0)]
    for group in (siblings, list(FALLBACK_SMALL_MODELS)):
        counted = [(n, _param_count(n, num_classes)) for n in group if n != name]
        smaller = [(n, p) for n, p in counted if p < params]
        if smaller:
            return max(smaller, key=lambda item: item[1])
    return None


def _gain(before: MemoryBreakdown, after: MemoryBreakdown, gpu_bytes: int) -> tuple[str, int, bool]:
    saved = before.total_bytes - after.total_bytes
    fits = after.total_bytes <= gpu_bytes
    verdict = "fits" if fits else f"still {format_bytes(after.total_bytes - gpu_bytes)} over"
    text = f"saves {format_bytes(saved)}: {format_bytes(after.total_bytes)} of {format_bytes(gpu_bytes)}, {verdict}"
    return text, saved, fits


def recommendations(breakdown: MemoryBreakdown | dict, gpu_bytes: int) -> list[dict]:
    """Options for a step that does not fit in ``gpu_bytes`` (empty list when it fits); see module docstring."""
    bd = _as_breakdown(breakdown)
    profile = bd.profile
    assert profile is not None
    if bd.total_bytes <= gpu_bytes:
        return []
    train = bd.mode == "train"
    recs: list[dict] = []

    def add(action: str, reason: str, after: MemoryBreakdown, extra: str = "") -> None:
        text, saved, fits = _gain(bd, after, gpu_bytes)
        if saved > 0:
            recs.append({"action": action, "reason": reason, "expected_gain": text + extra,
                         "saves_bytes": saved, "fits_after": fits})

    # 1. the largest batch that fits
    best = max_batch_from_profile(profile, gpu_bytes, bd.precision, bd.amp, _opt(bd))
    if 1 <= best < bd.batch_size:
        steps = math.ceil(bd.batch_size / best)
        keep = (f"; accumulate gradients over {steps} steps to keep an effective batch of {bd.batch_size}" if train
                else f"; {bd.batch_size} samples then take {steps} batches")
        add(f"use --batch-size {best}",
            f"activations take {format_bytes(bd.activations_per_sample_bytes)} per sample, "
            f"{format_bytes(bd.activations_bytes)} at batch {bd.batch_size}; {best} is the largest batch that fits",
            compose(profile, best, bd.precision, bd.amp, _opt(bd)), keep)

    # 2. lower precision for activations (and weights, for inference)
    if train and bd.precision == "fp32" and not bd.amp:
        after = compose(profile, bd.batch_size, "fp32", True, _opt(bd))
        add("train with mixed precision (--amp: torch.autocast + GradScaler)",
            f"activations are {format_bytes(bd.activations_bytes)} in fp32; autocast keeps them in fp16/bf16 "
            "(weights, gradients and optimizer state stay fp32)", after,
            f"; max batch then {max_batch_from_profile(profile, gpu_bytes, 'fp32', True, _opt(bd))}")
    elif not train and bd.precision == "fp32" and not bd.amp:
        after = compose(profile, bd.batch_size, "fp16", False, _opt(bd))
        add("run inference in half precision (--precision fp16 or bf16)",
            f"weights ({format_bytes(bd.weights_bytes)}) and activations ({format_bytes(bd.activations_bytes)}) "
            "are fp32; half precision halves both", after)
    elif not train and bd.precision in ("fp16", "bf16") and not bd.amp:
        after = compose(profile, bd.batch_size, "int8", False, _opt(bd))
        add("quantise to int8 for inference (--precision int8)",
            "int8 stores 1 byte per weight and ~1/4 of fp32 per activation (approximation)", after)

    # 3. gradient checkpointing
    if train:
        layers = max(1, profile.leaf_modules)
        factor = max(2 / math.sqrt(layers), CHECKPOINT_MIN_FACTOR)
        act = profile.activations
        ckpt = dataclasses.replace(profile, activations=dataclasses.replace(
            act, per_sample_bytes=int(act.per_sample_bytes * factor)))
        add("use gradient checkpointing (torch.utils.checkpoint.checkpoint_sequential with ~sqrt(layers) segments)",
            f"stored activations shrink to ~{factor:.0%} ({layers} layers); costs {CHECKPOINT_COMPUTE_COST}",
            compose(ckpt, bd.batch_size, bd.precision, bd.amp, _opt(bd)))

    # 4. optimizer state
    if train and bd.optimizer in ("adam", "adamw"):
        add("use SGD with momentum, or an 8-bit Adam (bitsandbytes)",
            f"{bd.optimizer} keeps 2 state tensors per parameter ({format_bytes(bd.optimizer_bytes)}); "
            "momentum SGD keeps 1",
            compose(profile, bd.batch_size, bd.precision, bd.amp, "momentum"))

    # 5. a smaller model
    param_part = bd.weights_bytes + bd.gradients_bytes + bd.optimizer_bytes
    if best == 0 or param_part >= SMALLER_MODEL_PARAM_SHARE * bd.total_bytes:
        smaller = _smaller_model(bd.model, bd.params, profile.num_classes)
        if smaller is not None:
            name, params = smaller
            saved = int(param_part * (1 - params / bd.params))
            recs.append({
                "action": f"try a smaller model such as {name} ({params / 1e6:.1f} M parameters vs "
                          f"{bd.params / 1e6:.1f} M)",
                "reason": f"parameters, gradients and optimizer state take {format_bytes(param_part)} "
                          f"({param_part / bd.total_bytes:.0%} of the step)",
                "expected_gain": f"saves ~{format_bytes(saved)} of parameter memory; its activations differ too: "
                                 f"check with `fit --model {name}`",
                "saves_bytes": saved, "fits_after": None,
            })
    return recs


def oom_recommendations(breakdown: MemoryBreakdown | dict, gpu_bytes: int) -> list[dict]:
    """What to change when ``breakdown`` does not fit in ``gpu_bytes``: [{action, reason, expected_gain}, ...].

    The name the harness and the command use; the same as :func:`recommendations`.
    """
    return recommendations(breakdown, gpu_bytes)
