"""Models the profiler can put behind the data loader, chosen by name on the command line.

Three kinds, so a first run needs nothing downloaded and a real run can use the model the user trains:

- ``none``: no model at all; the loop measures the input pipeline alone (how fast can data arrive?).
- ``tiny``: :class:`TinyCNN`, a three-layer CNN that costs milliseconds per batch on a 2-core CPU, so a CPU-only run
  still has a compute stage without the model dominating the timings.
- any torchvision *classification* model (``resnet18``, ``resnet50``, ``mobilenet_v3_small`` ...), always built with
  ``weights=None``: the profiler measures time and memory, which do not depend on the weight values, and it must
  never reach the network.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import lru_cache

import torch
from torch import nn

from profiler.errors import UserError

NONE_MODEL = "none"
TINY_MODEL = "tiny"


class TinyCNN(nn.Module):
    """Three stride-2 conv blocks (16/32/64 channels, BN, ReLU), global average pooling and a linear head.

    Why this shape: stride 2 in every block cuts the pixel count by 4 per block, so a 224 px batch of 32 costs only
    a few tens of MFLOPs per image; the global pool makes it accept any image size (>= 32 px keeps at least a 4x4
    map after the three strides, so BatchNorm in training has more than one value per channel even at batch 1).
    """

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for out_ch in (16, 32, 64):
            layers += [
                nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(out_ch),
                nn.ReLU(inplace=True),
            ]
            in_ch = out_ch
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


@lru_cache(maxsize=1)
def _torchvision_names() -> tuple[str, ...]:
    """Classification models only: ``module=torchvision.models`` leaves out detection/segmentation/video models,
    whose inputs and outputs are not an image batch -> class logits."""
    import torchvision

    return tuple(sorted(torchvision.models.list_models(module=torchvision.models)))


def model_names() -> list[str]:
    """Every name :func:`build_model` accepts: ``none``, ``tiny``, then the torchvision classification models."""
    return [NONE_MODEL, TINY_MODEL, *_torchvision_names()]


def _unknown(name: str) -> UserError:
    return UserError(
        f"unknown model '{name}': use none, tiny or a torchvision classification model "
        "such as resnet18, resnet50, mobilenet_v3_small"
    )


def normalize_model_name(name: str) -> str:
    """Lower-cased, stripped name, checked against :func:`model_names` (UserError when unknown)."""
    key = (name or "").strip().lower()
    if key in (NONE_MODEL, TINY_MODEL) or key in _torchvision_names():
        return key
    raise _unknown(name)


def build_model(name: str, num_classes: int = 1000) -> nn.Module | None:
    """Build the model called ``name`` on the CPU, randomly initialised (``None`` for ``none``).

    Raises UserError for an unknown name or a non-positive ``num_classes``.
    """
    key = normalize_model_name(name)
    if num_classes < 1:
        raise UserError(f"num_classes must be at least 1, got {num_classes}")
    if key == NONE_MODEL:
        return None
    if key == TINY_MODEL:
        return TinyCNN(num_classes=num_classes)
    import torchvision

    with warnings.catch_warnings():
        # googlenet/inception_v3 warn that their default weight init will change; the values do not matter here.
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        return torchvision.models.get_model(key, weights=None, num_classes=num_classes)


def primary_output(out: object) -> torch.Tensor:
    """The class-score tensor of a model's output, whatever container the model wraps it in.

    Why: torchvision's googlenet and inception_v3 return ``GoogLeNetOutputs``/``InceptionOutputs`` (named tuples of
    logits and auxiliary logits) in train mode, Hugging Face models an object with ``.logits``, segmentation-style
    models a dict with ``'out'``; a loss needs the one tensor of class scores. Order: a tensor as is; a ``.logits``
    tensor (named tuples and model-output objects); a mapping's ``'out'`` or ``'logits'``, else its first value that
    resolves; a tuple/list's first item that resolves. UserError when nothing in it is a tensor.
    """
    found = _find_tensor(out, depth=0)
    if found is None:
        raise UserError(f"model output of type {type(out).__name__} holds no tensor of class scores")
    return found


def _find_tensor(out: object, depth: int) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if depth > 4:  # nested containers deeper than this are not a model's output convention
        return None
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, Mapping):
        for key in ("out", "logits"):
            if isinstance(out.get(key), torch.Tensor):
                return out[key]
        items: list[object] = list(out.values())
    elif isinstance(out, (tuple, list)):
        items = list(out)
    else:
        return None
    for item in items:
        found = _find_tensor(item, depth + 1)
        if found is not None:
            return found
    return None


def amp_dtype(device: torch.device) -> torch.dtype:
    """The autocast dtype for ``--amp`` on ``device``: bfloat16 where the hardware computes it natively, else float16.

    Why not always bfloat16: before Ampere (compute capability 8.0) CUDA GPUs only emulate bf16, several times slower
    than their fp16 tensor cores, so an AMP run there would measure the emulation. The CPU autocasts to bf16 only.
    torch.cuda.is_bf16_supported gained ``including_emulation`` in torch 2.3; older releases are asked through the
    compute capability instead.
    """
    if device.type == "cpu":
        return torch.bfloat16
    if device.type != "cuda":
        return torch.float16
    return torch.bfloat16 if _cuda_bf16_native(device) else torch.float16


def _cuda_bf16_native(device: torch.device) -> bool:
    try:
        if torch.version.hip:  # ROCm: bf16 is native on every GPU torch supports there
            return bool(torch.cuda.is_bf16_supported())
        with torch.cuda.device(device):
            try:
                return bool(torch.cuda.is_bf16_supported(including_emulation=False))
            except TypeError:  # torch < 2.3 has no including_emulation argument
                return torch.cuda.get_device_capability(device) >= (8, 0)
    except (RuntimeError, AssertionError):  # no usable CUDA device: nothing native
        return False


def needs_grad_scaler(dtype: torch.dtype, mode: str) -> bool:
    """Whether a ``mode`` step autocast to ``dtype`` needs a GradScaler: fp16 training does (its 5-bit exponent
    underflows small gradients to zero unless the loss is scaled up first); bf16 has fp32's range and inference has no
    gradients."""
    return dtype == torch.float16 and mode == "train"
