"""The ``fit`` command's choices and limits, apart from profiler/fit/estimate.py: the command line's parser is built
for every command (profiler/cli.py), and estimate imports torch, which ``attach`` does not need (its process then
stays at ~45 MB instead of ~520 MB).
"""
from __future__ import annotations

MODES = ("train", "infer")
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
# Optimizer state tensors per parameter: plain SGD keeps none, momentum one buffer, Adam/AdamW exp_avg + exp_avg_sq.
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
# Largest --image-size accepted: 8192 px is above any classification input in use (gigapixel pathology is tiled), and
# one 8192 px fp32 image is already 768 MiB; beyond it the measurement itself would exhaust the machine.
MAX_IMAGE_SIZE = 8192
