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
# Pre-resizing is suggested only when the images carry at least this many times the pixels of the pre-resized size:
# below, decode would get less than ~1.2x cheaper, within decode-time noise and not worth rewriting a dataset.
PRE_RESIZE_MIN_PIXEL_RATIO = 1.2
# With workers = 0, the first worker count suggested is at most this: 4 workers hide most decode latency for an
# image pipeline on common 4-16-core machines, and a larger first step risks RAM (each worker holds its own copy of
# what it touches); the run with workers then shows whether more pay.
FIRST_WORKERS_AT_MOST = 4
# An io-bound loader is told to multiply its workers by this (at least +2): blocked readers use no CPU, so doubling
# the reads in flight is a cheap step that shows whether the device has bandwidth left.
IO_WORKERS_GROWTH = 2
# A worker count the rules suggest is replaced by the fewest workers whose predicted rate is within this share of the
# what-if's best worker count (when that is more than the rules' own): the rules pick a count from cores alone (with
# workers = 0, cores - 1), which on a loop with little compute leaves most of the gain (1 worker +4 %, 2 workers +96 %
# on a 2-core VM whose main thread only waited); 5 % is the gain under which advice is not claimed (GAIN_CLAIMED_FROM),
# so fewer workers within it are as good, and cost less RAM.
WORKERS_NEAR_BEST = 0.05
# A larger batch is suggested only when the step's device-memory peak was below this share of the device: then at
# least twice the batch could fit.
BATCH_GROWTH_MAX_PEAK_SHARE = 0.5
# ... and the suggested batch keeps its peak under this share of the device: the rest is for the allocator's
# fragmentation, cuDNN workspaces and the activations that do not scale linearly with the batch.
BATCH_GROWTH_USABLE_SHARE = 0.8
# Finished batches waiting in the queue for at least half a compute step on average means the loader has slack:
# on a CPU-only machine, a worker fewer would hand its core back to the model without starving it.
READY_AHEAD_SLACK_OF_COMPUTE = 0.5

# --- Storage ----------------------------------------------------------------------------------------------------------
# The page cache can keep a dataset across epochs only if it fits in RAM that workers, pinned buffers and the model's
# host copies do not need; assume the cache may use at most this share of the RAM that was available at start.
# The one number behind "does the dataset fit in the page cache?" (analysis/io.py fits_in_page_cache), used by the
# dataset-vs-RAM finding and the "serve the dataset from RAM" recommendation alike.
PAGE_CACHE_SHARE_OF_AVAILABLE = 0.8
# At or above this share of bytes from the page cache, a run meant to measure storage measured RAM instead: with 90 %
# of reads free, the device's speed can no longer move the result much.
SERVED_FROM_RAM_FROM = 0.9
# A device read rate is taken from a run only when at least this share of the bytes its workers read came from the
# device. Below it the time blocked in reads is mostly page-cache copies and scheduling, and dividing a few pages by
# it gives nonsense (a warm 64-file run: 4 KB from the device over 2,000 steps read as a 30 KB/s "device", a storage
# ceiling of 24 samples/s under a measured 354). Such a run is described by its page-cache reads instead.
DEVICE_RATE_MIN_SHARE = 0.05

# --- Host RAM (analysis/ram.py) ---------------------------------------------------------------------------------------
MIB = 1024**2
# A worker's USS rises by a few tens of MiB at start-up (imports touched after fork, decode buffers, the first
# prefetched batches) and then levels off. Growth beyond 50 MiB per worker over the run is more than that start-up
# cost and, multiplied by the worker count, is RAM a user notices.
COPY_ON_READ_MIN_GROWTH_BYTES = 50 * MIB
# At least this many USS (or PSS) readings per worker: fewer cannot tell a trend from a step. The sampler budgets
# smaps reads (one every few seconds per process), so a short run may not reach it, and then nothing is claimed.
COPY_ON_READ_MIN_READINGS = 3
# Net growth / sum of all rises. Copy-on-read only ever adds pages (~1.0); allocator churn (batches allocated and
# freed) rises and falls, so its net growth is a small share of its rises. 0.7 tolerates a few dips from freed buffers.
COPY_ON_READ_MIN_MONOTONE_SHARE = 0.7
# Share of the net growth that happens in the second half of the worker's readings. Steady growth puts ~50 % there;
# a start-up ramp that levels off puts ~0 %. 20 % separates "still growing" from "grew once, at start".
COPY_ON_READ_MIN_LATE_SHARE = 0.2
# Copy-on-write copying turns pages the worker already had resident (shared with the parent) private: USS rises while
# RSS stays. New allocations (decode buffers, a growing heap, malloc arenas) add pages: RSS rises with USS. Only the
# USS growth RSS did not match is copying; at least this share of a worker's USS growth must be such, or the growth
# is the heap's, not the dataset's objects' (the built-in pipeline's workers: USS +147 MiB with RSS +150 MiB).
COPY_ON_READ_MIN_COPIED_SHARE = 0.5
# What the built-in dataset's Python objects can hold per file (a path str, a label int and their list slots, ~200 B):
# copies beyond files x this cannot be its objects.
BUILTIN_OBJECT_BYTES_PER_FILE = 1024

# When no worker was measured (a run with 0 workers), this private memory per worker is assumed: a forked worker
# with torch imported privately holds ~50-150 MiB (heap pages it writes, decode buffers, prefetch_factor batches);
# 150 MiB errs high. Results that use it say basis "assumed".
ASSUMED_WORKER_PRIVATE_BYTES = 150 * MIB
# Warn when the projection leaves less than this share of the available RAM: the page cache that feeds the loader
# shrinks first, so the input pipeline slows down before anything is killed.
RAM_HEADROOM_WARN_FRACTION = 0.10

# --- Comparing runs (analysis/compare.py) --------------------------------------------------------------------------
# 2,000 resamples: the 2.5/97.5 % percentiles then rest on 50 resamples each side, enough for a stable interval edge
# (Efron & Tibshirani recommend >= 1,000 for percentile intervals); vectorised it costs milliseconds per metric.
RESAMPLES = 2000
# 95 % intervals: the convention; a comparison tests ~30 rows, so one or two marks by chance are to be expected.
CONFIDENCE = 0.95
# The one-sentence story attributes a speed change to the wait when the wait's change is at least this share of the
# per-step time change; below it, compute (the model) moved the speed, and the sentence says so instead.
WAIT_EXPLAINS_FROM = 0.5
# A cause is "mostly" responsible when it holds at least this share of the change in wait; else the top two are named.
MOSTLY_FROM = 0.5
# Within the cpu cause, a stage (decode, augment, collate) is named in the sentence when it holds at least this share
# of the cpu change: smaller parts would make the sentence longer without pointing anywhere useful.
CPU_STAGE_NAMED_FROM = 0.2
# A speed change within noise but more than 10 % either way (ratio outside 0.9-1.1) may be real and only under-
# sampled: the sentence then says more steps would narrow the interval. Inside that band, it is simply no change.
WORTH_MORE_STEPS_OUTSIDE = (0.9, 1.1)
# Two runs with the same --cache setting whose page-cache residency at start differs by at least this (25 points)
# ran under different storage conditions (one cold, one warm), and the comparison says so. Below, a re-run's drift.
RESIDENCY_DIFFERS_FROM = 0.25
# A bootstrap interval needs this share of resamples with a defined statistic (a ratio whose baseline resampled to 0
# is undefined): with fewer, the defined ones are a biased subset and no honest interval can be given.
INTERVAL_MIN_DEFINED_SHARE = 0.9

# --- Patterns of a user's job (analysis/patterns.py) -----------------------------------------------------------------
# Waiting for a core is worth its own finding once it holds this share of the stall: then the fix is fewer workers
# (or fewer model threads), not faster code. Same bar as acting on any cause.
OVERSUBSCRIBED_FROM = CAUSE_WORTH_ACTING_ON
# num_workers=0: the main thread's time off its core in lean stretches whose once-per-stretch check failed
# (instrument/lean_check.py) was counted as on-core, cpu; at this share of the stall or more a finding says so. Why 5 %:
# under it the bound moves the stall's split by less than the run-to-run spread of a light loop's stall share (±3
# points on the light benchmark), and the verdict's cause needs far more to change.
LEAN_UNCHECKED_NOTE_FROM = 0.05
# An epoch start (worker start-up + first prefetch) is flagged when it costs at least this many measured steps: below
# a couple of steps it is lost in the run-to-run noise of one epoch; above, persistent_workers pays for itself.
EPOCH_START_FLAG_STEPS = 2.0
# A "long wait" in the lock-step sawtooth is one at least this many times the median wait (and at least
# SAWTOOTH_MIN_WAIT_S): workers that start together finish together, so one step in N waits for all of them.
SAWTOOTH_LONG_FACTOR = 3.0
SAWTOOTH_MIN_WAIT_S = 0.005
# ... and the pattern is reported only when long waits are regular (their spacing is the worker count in at least
# this share of gaps) and hold at least this share of the stall.
SAWTOOTH_REGULAR_SHARE = 0.6
SAWTOOTH_STALL_SHARE = 0.5

# --- Several ranks (torchrun / DDP) -----------------------------------------------------------------------------------
# How long a rank waits for rank 0 to publish the run folder, and rank 0 for the other ranks' run.json files. Why
# 60 s: a rank ends within a few seconds of the others (they meet in every all-reduce); what one still lacks after a
# minute is a rank that hangs, and the merge then names it missing instead of holding the job up.
RANK_WAIT_S = 60.0
# A rank that waited at least this share of its step in collectives is "waiting for someone": below it, the
# all-reduce's own cost and noise (a few per cent of a step) explain the wait.
STRAGGLER_WAIT_SHARE = 0.10
# ... and the straggler must be the rank that waited least in at least this share of the aligned steps: a rank that
# holds the others up does so step after step; two ranks taking turns (noise, a shared core) hold no one up.
STRAGGLER_CONSISTENT_FROM = 0.6

# Rank 0's wait for the others' summaries, scaled by what the others reported: after rank 0's own end, each report
# moves the deadline to (latest report) + max(RANK_WAIT_MIN_S, RANK_WAIT_SPREAD_FACTOR x the spread of the arrivals
# seen so far), never beyond RANK_WAIT_S. Why: ranks of one DDP job end within a few seconds of each other (they meet
# in every all-reduce), so a rank still silent several spreads after the last report is dead or hung; 5 s covers
# analyzing one's own record and a store round trip on a loaded machine; 3 spreads leaves room for a slow tail.
RANK_WAIT_MIN_S = 5.0
RANK_WAIT_SPREAD_FACTOR = 3.0
# A rank's summary keeps at most this many aligned steps (every 2^k-th step index, the same choice on every rank):
# enough to see a trend and the per-step skew, and it bounds what 1,024 ranks send through the store (~20 KB each).
RANK_SUMMARY_MAX_STEPS = 512
# Straggler rule at scale. With many ranks "the rank that waited least" is always someone; a rank is a straggler only
# when its collective-wait share is below the others' median by at least STRAGGLER_WAIT_SHARE of a step AND by more
# than STRAGGLER_SPREAD_K robust standard deviations of the others (1.4826 x their median absolute deviation): 4
# sigma, so that among 1,024 normally-spread ranks a false alarm is rarer than 1 in 10 (p(z < -4) = 3e-5 per rank).
STRAGGLER_SPREAD_K = 4.0
# (Not a choice: a normal distribution's standard deviation is 1.4826 x its median absolute deviation, the factor that
# turns a MAD into the robust sigma the rules above and the monitor's change points, MONITOR_ROBUST_Z, are stated in.)
MAD_TO_SIGMA = 1.4826
# A host whose ranks are all stragglers (two ranks at least) is reported as a slow node: its storage, CPU, network or
# thermal state, a different fix from one rank's data.
SLOW_HOST_MIN_RANKS = 2
# Clocks across hosts: a host's offset to rank 0 comes from this many store round trips (the one with the least delay
# kept, NTP-style); 8 rounds take a few ms on a LAN and make a delayed round (a busy store) unlikely to be the one kept.
CLOCK_SYNC_ROUNDS = 8
# The ranks view draws one lane per rank up to this many ranks; beyond it, a heatmap (rank x step) and the slowest
# ranks named: 1,024 lanes are unreadable.
RANKS_LANES_MAX = 16
# The HTML and terminal table list every rank up to this many; beyond it, the stragglers, the slowest and fastest few
# and the missing ranks (the full table is in ranks.json).
RANKS_TABLE_MAX = 32

# --- What-if intervals and a perturbed baseline (analysis/whatif.py, analysis/rates.py) ---------------------------
# The model's own error on settings it did not see, beyond what the baseline's spread explains: the relative half-
# width added (in quadrature) to every prediction for another setting. From scripts/bench_whatif.py on the 2-core
# bench host: once the other load each point really saw is put back into the prediction (the bench's
# "whatif_error_at_each_points_load"), the median error over its 10 points was 9.7 % (storage-throttled cases 2-9 %
# in an earlier quiet run); 12 % covers the bulk of those without making every interval useless. The error that the
# change of other load between runs adds is not in this constant: the interval's own other-load term carries it.
WHATIF_RESIDUAL = 0.12
# The 0-worker prediction from a run with workers rests on a few samples timed in the main process after the window
# (harness/ceiling.py), not on the window itself: earlier runs were off by -31 % and +194 %. Its interval is widened
# by this much more (relative, in quadrature) so that it says how little it rests on.
WORKERS0_RESIDUAL = 0.35
# A window whose second half ran at a rate this much (relative) away from its first half drifted: the load or the
# pipeline changed while it was measured, and one figure does not describe it.
DRIFT_FROM = 0.10
# Other processes' use of the cores varied by at least this many cores (10th to 90th percentile of the samples)
# during the window: other load came and went, so the cores the job had are not one number.
OTHER_LOAD_VARIED_FROM = 0.25
# The first quarter of the window ran at a rate this much (relative) away from the rest: the warm-up had not settled
# (page cache filling, workers still starting, the allocator growing) when the measurement began.
WARMUP_UNSETTLED_FROM = 0.15
# The model, fed this run's per-sample costs, expects the measured setting to run at least 1/0.8 = 1.25x faster
# than it did: the window ran below what its own costs allow (something the run did not see took time), so the
# calibration that scales every prediction by it is suspect. Above 0.8 the gap is the model's usual error.
BELOW_OWN_COSTS_FROM = 0.8
# A recommendation claims a gain only when the low end of its prediction's interval is at least this (relative)
# above the measured throughput: below, the gain is within a shared host's run-to-run noise (5 %).
GAIN_CLAIMED_FROM = 0.05
# A job "read files" (and gets storage what-if rows) when its dataset asked for at least a page per sample, or had a
# timed read stage, or read from the device: below 4 KiB per sample, the bytes are the profiler's own /proc readings,
# pipes and imports, not data (an in-memory dataset measured ~50 B per sample).
READS_FILES_FROM_BYTES = 4096
# More bytes from the device than read() asked for, by this factor: the reads went around read() (page faults on
# memory-mapped files: np.memmap token files), so rchar cannot give a page-cache hit rate. Read-ahead alone rounds a
# cold file up to pages and a 128 KiB window (a 100 KB JPEG read cold measured ~1.04x); 2x is well beyond that.
DEVICE_BEYOND_RCHAR_FACTOR = 2.0

# --- Worker -> main transfer: bytes or scheduling (analysis/recommend.py) -------------------------------------------
# A batch reaches the main process through shared memory at well over 1 GB/s (its tensors are copied once into shared
# memory; the pickle holds only handles). At this floor a batch's bytes would take under a quarter of its transfer
# time, so the bytes are not what is slow: a 2 KB batch "taking 20 ms" is a process waiting for a core.
TRANSFER_BYTES_FLOOR_B_PER_S = 200e6
TRANSFER_BYTES_SHARE = 0.25
# The main thread waited for a core this share of a batch's transfer time or more (its run-queue wait inside next(),
# from /proc/thread-self/schedstat): scheduling explains the transfer, and compact batches would not shorten it.
TRANSFER_RUNQ_SHARE = 0.25

# --- Monitor (profiler/monitor/: the whole job as windows) ----------------------------------------------------------
# Steps per window by default (and at least MONITOR_MIN_WINDOW_S, below): what a window's verdict rests on when steps
# are slow. For any job faster than 10 steps a second the minimum decides (a window of 10 s); slower jobs get windows
# of 100 steps (a 2-steps/s job: 50 s). Was 1,000 until 2026-12-07: with the minimum there it only made slow jobs'
# windows long (a 45-steps/s job: 22 s; 2 steps/s: 8 minutes), so a change was placed minutes late and a phase shorter
# than two windows went unseen; a cut's cost (5-30 ms) is well under 1 % of any window of 10 s or more, and a
# window's detail (MONITOR_DETAIL_STEPS of its steps) costs per step what `run` costs, nothing beside slow steps.
MONITOR_WINDOW_STEPS = 100
# ... and the default window lasts at least this long: a light loop (~0.3 ms per step) would otherwise cut every
# 0.3 s, and a cut (the window's timeline and attribution, 5-30 ms on the loaded 2-core VM, profiled) would cost
# several per cent of the job. An explicit --window N is taken as given.
MONITOR_MIN_WINDOW_S = 10.0
# Steps of each window kept in full detail (per-sample spans, what splits the idle time by cause); the rest of the
# window only as exact totals. 64 steps at batch 32 are ~2,000 dataset calls: shares stable to a few per cent.
MONITOR_DETAIL_STEPS = 64
# The detail is taken in this many chunks spread over the window (its start, then every window/chunks steps; for a
# time window every MONITOR_DETAIL_CHUNK_EVERY steps): a change in the middle of a window then shows in its cause
# split as well as in its exact wait share. 4 chunks of 16 steps keep each chunk's shares meaningful (a chunk is
# still 500 dataset calls at batch 32).
MONITOR_DETAIL_CHUNKS = 4
MONITOR_DETAIL_CHUNK_EVERY = 250
# NOTE [ Monitor gaps ] (instrument/gaps.py): between detail chunks the monitor's hook is off the job's path and it
# probes one step this many times a second (its wait and length: the gap's wait share). 10 Hz: a default window's
# gaps (~10 s) hold ~100 probes, the wait share's ratio estimate good to a few points for a steady loop. Each probe
# puts the hook back on for two steps; with the look before them, its three steps took ~100 µs more CPU than gap
# steps (the light loop, workers=0, 2026-12-07: their paths are cold at 10 a second), so 10 Hz is ~0.1 % of a core.
MONITOR_GAP_HZ = 10.0
# A gap opens only when the monitor's next event is at least this far off: a couple of probes or more behind its
# estimate, and short windows (tests', --window 20) keep the hook on every step, as before gaps.
MONITOR_GAP_MIN_S = 0.2
# A gap closes when the epoch has this many batches left (its iterator's count, checked at every step of the gap):
# the epoch's last batches and its end (its StopIteration, the time until the next epoch) are seen by the hook as in
# ``run``. 2, not 1: a probe may take the step at which the count reaches it past the look.
MONITOR_GAP_EPOCH_MARGIN = 2
# A gap's step reads the clock (for a probe or the monitor's next event by time) only every 2^j steps, 2^j steps lasting
# about this long at the gap's rate so far, at most MONITOR_GAP_CLOCK_EVERY_MAX: a clock read (~40 ns, vDSO) on every
# step is work the gap need not do (one pair put it at ~0.25 % of a light loop, within that bench's noise), and a look
# that comes a few ms late changes nothing (a probe is a step the clock chose, an event of a 10-s window). At most 16: a
# job that slows down 100-fold inside a gap has its next look at most 16 of its slow steps late; the look re-reads the
# rate.
MONITOR_GAP_CLOCK_EVERY_S = 0.004
MONITOR_GAP_CLOCK_EVERY_MAX = 16
# A change must persist this many windows in a row before it is called one: a single odd window (a GC pause, a
# neighbour's burst, a checkpoint) is noise, two in a row is a regime. The change is placed at the first of them.
MONITOR_PERSIST_WINDOWS = 2
# ... or, for a cause change, windows of the new cause lasting this long in all: a window of 20 s or more whose verdict
# flipped whole is no GC pause or burst of a few seconds, and waiting for a second one would miss a regime that lasts
# under three windows. With the default windows of 1,000 steps then (at least 10 s) a 105-s job with a 35-s io phase
# between two cpu ones (~45 steps/s, 22-s windows) got one io window and was told "one regime throughout"
# (2026-12-07); a job slower than 5 steps a second still has default windows over 20 s (MONITOR_WINDOW_STEPS), and
# --window 60s windows are longer. 20 s is two of the shortest default windows: a fast job's changes still need two
# windows, as before; short windows (--window 20) need two of them.
MONITOR_PERSIST_S = 20.0
# Robust z threshold (|x - median| / (1.4826 * MAD) of the current regime's windows): 4 leaves a normal sample's
# false-alarm rate near 6e-5 per window, and MAD ignores the outliers that a mean and standard deviation would chase.
MONITOR_ROBUST_Z = 4.0
# Baseline: the last this many windows of the current regime (median and MAD need a handful; more lags a slow drift).
MONITOR_BASELINE_WINDOWS = 32
# A throughput drop must also be at least this relative size: on a calm machine the MAD can be tiny, and a 3 % wobble
# would otherwise pass the z test without mattering to anyone.
MONITOR_MIN_DROP = 0.20
# A cause change must move the new cause's share of the window by at least this much (absolute) over the baseline:
# the verdict bands (5 %, 20 %) flip on a share that crosses them by a hair.
MONITOR_MIN_SHARE_MOVE = 0.05
# Memory growth: the tree's RSS above the regime's median by this share and by at least MONITOR_MEM_GROWTH_MIN_BYTES
# (small jobs' RSS moves by tens of MB as the allocator settles; growth that ends in swap is hundreds of MB).
MONITOR_MEM_GROWTH_SHARE = 0.25
MONITOR_MEM_GROWTH_MIN_BYTES = 256 * 1024 * 1024
# Periodic stalls: a window whose wait share is this much (absolute) above the job's running median is a stall spike;
# three spikes whose spacings agree within MONITOR_PERIOD_TOLERANCE (relative) are periodic (a checkpoint every N
# steps, a cache flush).
MONITOR_SPIKE_FROM = 0.10
MONITOR_PERIOD_TOLERANCE = 0.25
# The record: at most this many windows; the newest MONITOR_FULL_WINDOWS stay at full resolution and older ones are
# folded pairwise (windows around a change point are kept). 512 windows are ~1 MB of JSON: a week-long job's record
# stays far under 20 MB.
MONITOR_MAX_WINDOWS = 512
MONITOR_FULL_WINDOWS = 128
# Change points kept (the oldest go first): each holds its before/after windows (~4 kB).
MONITOR_MAX_CHANGES = 200
# monitor.json is rewritten at a cut at most this often (seconds): live `report` sees a record this fresh, and a
# 1 MB write every few seconds would cost the job more than the monitor's 1 % budget.
MONITOR_WRITE_EVERY_S = 10.0

# --- The monitor across ranks (profiler/monitor/ranks.py) ------------------------------------------------------------
# A rank's input *lags* at some steps when its wait share there is above the others' median by at least this share of
# its time (and, with three or more others, by STRAGGLER_SPREAD_K of their robust spread). Why 10 points: the same
# step a single rank's change points use for a wait spike (MONITOR_SPIKE_FROM), and the size at which a run's verdict
# calls input a bottleneck worth fixing; ranks of one job differ by a few points from scheduling alone.
MONITOR_RANK_LAG_SHARE = 0.10
# Rank 0 of a monitored torchrun job draws the ranks side by side at its end, from the rank folders it can see; the
# others end within seconds of it (DDP meets in every all-reduce). It waits at most this long for a rank still
# "running" to write its final record, then draws what that rank has written so far (rewritten every cut) and says so.
MONITOR_RANKS_WAIT_S = 5.0
