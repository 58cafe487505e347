"""Every threshold the analysis uses, in one place, each with the reason for its number.

Changing one here changes the verdicts and recommendations everywhere; tests import these names rather than
repeating the numbers.
"""
from __future__ import annotations

# --- Input-bound bands (TensorFlow's input-pipeline analyzer, tf.data performance guide) -------------------------
# < 5 % of step time waiting for input: "not input-bound"; the wait is within run-to-run noise and Python overhead.
NOT_INPUT_BOUND_BELOW = 0.05
# 5-20 %: "moderately input-bound"; >= 20 %: "highly input-bound" (same source).
HIGHLY_INPUT_BOUND_FROM = 0.20

# --- Resource saturation --------------------------------------------------------------------------------------------
# Mean CPU use (of the usable cores) at or above this means the cores are saturated: more workers would only
# time-slice the same cores. 85 % rather than 100 % because the sampler, the kernel and the main loop need a share.
CPU_SATURATED_FROM = 0.85
# A worker count can only help if at least one core is left over after the workers and the main process.
MIN_IDLE_CORES_FOR_MORE_WORKERS = 1.0

# --- Attribution ----------------------------------------------------------------------------------------------------
# A cause must hold at least this share of the stall before a recommendation is made for it: below, acting on it
# could at best win back a few per cent of a wait that is itself small.
CAUSE_WORTH_ACTING_ON = 0.25
# When unexplained ("other") time is above this share of the stall, the report says so plainly, because the verdict
# then rests on a minority of the wait.
OTHER_SHARE_WARN = 0.40

# --- Recommendations ------------------------------------------------------------------------------------------------
# Decode cost grows with pixel count; images whose short side exceeds the training size by this factor are worth
# pre-resizing (torchvision's recipe resizes to 256 for a 224 crop: 1.14x; we allow a little more).
PRE_RESIZE_FACTOR = 1.3
# Files smaller than this are IOPS-bound rather than bandwidth-bound on HDDs and network storage (a 7,200 rpm disk
# does ~150 random reads/s, i.e. ~20 MB/s at 128 KiB): packing them into shards (tar/WebDataset) then pays.
SMALL_FILE_BYTES = 256 * 1024
# The most workers we will ever suggest per usable core: beyond 2, context switches eat the gain for CPU-bound work.
MAX_WORKERS_PER_CORE = 2.0
# Finished batches waiting in the queue for at least half a compute step on average means the loader has slack:
# on a CPU-only machine, a worker fewer would hand its core back to the model without starving it.
READY_AHEAD_SLACK_OF_COMPUTE = 0.5

# --- Storage ----------------------------------------------------------------------------------------------------------
# The page cache can keep a dataset across epochs only if it fits in RAM that workers, pinned buffers and the model's
# host copies do not need; assume the cache may use at most this share of the RAM that was available at start.
PAGE_CACHE_SHARE_OF_AVAILABLE = 0.8
