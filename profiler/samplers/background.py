"""The background sampler: one daemon thread that records machine, process and GPU time series during a run.

It produces the `samples` section of run.json (documented in docs/run_json.md, "samples"). Raw series only;
analysis aggregates later.

Why one thread in the main process rather than a sampler process: a thread costs no extra core on a 2-core
machine and can see the harness's labels directly. Its price is the GIL: while a tick runs Python it holds the GIL
and the training loop waits. So a tick is kept to a few hundred µs (see the module notes of system.py and
process_tracker.py; `sampler_overhead` in the output reports the thread's own CPU time per tick, measured with
time.thread_time), and it sleeps with Event.wait so stop() returns within one tick.

Measured (2-core VM, main process with torch imported + 2 DataLoader-like workers, 10 Hz): ~365 µs of thread
CPU per tick without PSS, i.e. ~0.4 % of one core; PSS/USS reads add at most FULL_MEMORY_CPU_BUDGET (0.3 %) on
average, in rare single ticks of ~10 ms (kernel time, GIL released).

Fork note: DataLoader workers are forked while this thread runs. That is safe here (the child never touches the
sampler; it inherits a few kept-open /proc descriptors, harmless), but Python >= 3.12 emits a DeprecationWarning
for fork() in a multi-threaded process.

Robustness: the sampler must never break the run it observes. Errors in a tick are recorded once in
`absent["sampler_error"]` and sampling continues; stop() is idempotent and works if start() was never called or
failed. Every series of one tick is appended together under a lock, so lengths always agree.
"""
from __future__ import annotations

import os
import threading
import time

import psutil

from profiler.samplers.gpu import SERIES_HOW as GPU_SERIES_HOW
from profiler.samplers.gpu import GpuSampler
from profiler.samplers.process_tracker import SERIES_HOW as PROCESS_SERIES_HOW
from profiler.samplers.process_tracker import ProcessTracker
from profiler.samplers.system import SystemReader
from profiler.samplers.thinning import MAX_TICKS, fit_series, halve, halve_rows, rows_to_points, to_points

# 10 Hz resolves the ~0.1-1 s phases of a data pipeline (a batch, a stall) at < 1 % of one core.
DEFAULT_INTERVAL_S = 0.1
# Halvings (thinning.py) when a run enters its tail (Sampler.slow_down: the steps beyond the detail, whose record
# keeps only totals). Why: the job pays for a tick beyond the thread's own ~0.5 ms of CPU (the GIL handed over and
# back, the loop's caches), and a long window spends most of its time in the tail. Measured as concurrent pairs of
# two profiled light loops in their tail (workers=2, 7 rounds; scripts/paired_processes.py): 5 Hz instead of 10
# took -1.43 % of the process tree's CPU per step (every round lower), 2.5 Hz -1.71 %, the PSS reads left out at
# 10 Hz +0.74 % (no saving): the rate is what costs. One halving takes most of it and keeps 5 Hz.
TAIL_HALVINGS = 1
# Minimum ticks between two PSS/USS readings of one process; the real rate is also capped by a CPU budget
# (process_tracker.FULL_MEMORY_CPU_BUDGET) because smaps_rollup costs milliseconds for a large process.
DEFAULT_FULL_MEMORY_EVERY = 5
# New children are looked for every this many ticks (labelled pids are picked up at once); workers are long-lived.
DEFAULT_CHILDREN_EVERY = 5
# stop() waits this long for a tick in progress (an NVML call can block ~20 ms; a hung driver must not hang us).
JOIN_TIMEOUT_S = 2.0


class Sampler:
    """Samples every `interval_s` from start() to stop() on a daemon thread; see the module docstring.

    root_pid: process whose tree is followed (default: this process). gpu_index: NVML index (see
    gpu.nvml_index_for_cuda_device), None for a CPU run. disk: block device name (e.g. "vda") that holds the data,
    None for the sum over all physical disks.
    """

    def __init__(self, t0_ns: int, interval_s: float = DEFAULT_INTERVAL_S, root_pid: int | None = None,
                 gpu_index: int | None = None, disk: str | None = None,
                 full_memory_every: int = DEFAULT_FULL_MEMORY_EVERY,
                 children_every: int = DEFAULT_CHILDREN_EVERY, max_ticks: int = MAX_TICKS) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if max_ticks < 2:
            raise ValueError(f"max_ticks must be >= 2, got {max_ticks}")
        self.t0_ns = t0_ns
        self.interval_s = float(interval_s)
        self.max_ticks = int(max_ticks)
        self.halvings = 0  # times the series were halved (thinning.py): a long run keeps at most max_ticks points
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self._disk_arg = disk
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._stop_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._result: dict | None = None
        self._absent: dict[str, str] = {}
        self._tracker = ProcessTracker(self.root_pid, full_memory_every, children_every, self.interval_s)
        self._gpu = GpuSampler(gpu_index)
        self._system: SystemReader | None = None
        self._ticks = 0
        self._halvings_due = 0  # asked for by slow_down(), done by the thread at its next tick
        self._slowed = False
        self._thread_cpu_s = 0.0
        self._worst_tick_s = 0.0
        self._t_s: list[float] = []
        self._per_core: list[list[float]] = []
        self._ram_used: list[int] = []
        self._ram_avail: list[int] = []
        self._cache: list[int] = []
        self._disk_rate: list[float | None] = []
        self._shm: list[int | None] = []

    # ---- public API ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread; a second call is a no-op. Failure to start is recorded, never raised."""
        if self._thread is not None or self._result is not None:
            return
        try:
            self._thread = threading.Thread(target=self._run, name="profiler-sampler", daemon=True)
            self._thread.start()
        except Exception as exc:  # e.g. RuntimeError: can't start new thread
            self._thread = None
            self._absent["sampler"] = f"sampler thread did not start: {exc}"

    @property
    def ticks(self) -> int:
        """Ticks taken so far (halvings included): how a caller waits for the sampler to have seen something."""
        return self._ticks

    def label_pid(self, pid: int, role: str, worker_id: int | None = None) -> None:
        """Say what `pid` is ("worker" with its DataLoader worker id, "child", "main"); any time, any thread."""
        self._tracker.label(pid, role, worker_id)

    def slow_down(self, halvings: int | None = None) -> None:
        """Tick ``2 ** halvings`` times less often from the next tick on, the series so far halved as many times so
        they stay evenly spaced (as thinning does; ``halvings`` in the record counts them); once per sampler, later
        calls do nothing. Called when a run enters its tail (TAIL_HALVINGS, read at the call, says why); any
        thread."""
        if not self._slowed:
            self._slowed = True
            self._halvings_due = max(0, TAIL_HALVINGS if halvings is None else halvings)

    def stop(self) -> dict:
        """Stop the thread and return the `samples` dict; later calls return the same dict."""
        with self._stop_lock:
            if self._result is not None:
                return self._result
            self._stop_event.set()
            thread = self._thread
            if thread is not None:
                thread.join(JOIN_TIMEOUT_S)
                if thread.is_alive():
                    self._absent["sampler_stop"] = f"sampler thread still busy after {JOIN_TIMEOUT_S} s; cut short"
            elif "sampler" not in self._absent:
                self._absent["sampler"] = "sampler was never started"
            with self._lock:
                if thread is None or not thread.is_alive():
                    try:
                        self._tracker.final_main_reading()
                    except Exception as exc:  # noqa: BLE001 - a figure for the report; never the run's problem
                        self._absent.setdefault("sampler_error", f"final reading failed: {exc!r}")
                self._result = self._build()
            return self._result

    # ---- thread -------------------------------------------------------------------------------------------------
    def _now_s(self) -> float:
        return (time.perf_counter_ns() - self.t0_ns) / 1e9

    def _run(self) -> None:
        try:
            self._gpu.open()  # first: NVML init can take a while, and the baselines below should be fresh
            try:
                system = self._system = SystemReader(self._disk_arg)
                system.prime()
                self._tracker.prime()
            except Exception as exc:
                self._absent["sampler"] = f"sampler setup failed: {exc!r}"
                return
            next_at = time.perf_counter() + self.interval_s
            while not self._stop_event.wait(max(0.0, next_at - time.perf_counter())):
                self._tick(system)
                next_at += self.interval_s
                now = time.perf_counter()
                if next_at < now:  # fell behind (machine overloaded): skip missed ticks rather than burst
                    next_at = now + self.interval_s
        finally:
            with self._lock:  # stop() may be building the result from the same objects
                self._gpu.close()
                self._tracker.close()
                if self._system is not None:
                    self._system.close()

    def _tick(self, system: SystemReader) -> None:
        cpu0 = time.thread_time()
        t_s = round(self._now_s(), 4)
        index = self._ticks
        try:
            sysv = system.read()
            gpu = self._gpu.read(index)  # outside the lock: PCIe reads block ~20 ms (GIL released)
            with self._lock:
                while self._halvings_due > 0:  # (slow_down: before this tick's point, which is the new spacing's first)
                    self._halvings_due -= 1
                    self._halve()
                self._t_s.append(t_s)
                self._per_core.append(sysv.cpu_percent_per_core)
                self._ram_used.append(sysv.ram_used_bytes)
                self._ram_avail.append(sysv.ram_available_bytes)
                self._cache.append(sysv.page_cache_bytes)
                self._disk_rate.append(sysv.disk_read_bytes_per_s)
                self._shm.append(sysv.shm_used_bytes)
                self._gpu.append(t_s, gpu)
                self._tracker.tick(index, t_s)
                if len(self._t_s) >= self.max_ticks:
                    self._halve()
        except Exception as exc:  # never let sampling break the run; say so once
            self._absent.setdefault("sampler_error", f"tick {index} failed: {exc!r}")
        self._ticks += 1
        spent = time.thread_time() - cpu0
        self._thread_cpu_s += spent
        self._worst_tick_s = max(self._worst_tick_s, spent)

    def _halve(self) -> None:
        """Every series at half the resolution, and ticks half as often from now on (thinning.py says why and
        how). Called under the lock, so every series of one tick is halved together."""
        for attr, _, how in _SYSTEM_SERIES:
            setattr(self, attr, halve(getattr(self, attr), how))
        self._per_core = halve_rows(self._per_core)
        self._gpu.halve()
        self._tracker.halve()
        self.interval_s *= 2
        self.halvings += 1

    # ---- output -------------------------------------------------------------------------------------------------
    def _build(self) -> dict:
        absent: dict[str, str] = {}
        if self._system is not None:
            absent.update(self._system.absent)
        absent.update(self._tracker.absent)
        absent.update(self._gpu.absent)
        absent.update(self._absent)
        if self._gpu.index is not None and self._gpu.to_dict() is None and "gpu" not in absent:
            absent["gpu"] = "GPU sampling did not start"
        if self._gpu.index is None:
            absent.setdefault("gpu", "no GPU index given (CPU run)")
        ticks = len(self._t_s)
        # A halved run is written with exactly max_ticks // 2 points per series (thinning.to_points): its size no
        # longer depends on where between two halvings it stopped. A run never halved keeps every tick.
        m = self.max_ticks // 2 if self.halvings else ticks + 1
        series = {key: to_points(getattr(self, attr), m, how) for attr, key, how in _SYSTEM_SERIES}
        return {
            "interval_s": self.interval_s,
            "t_s": series["t_s"],
            "cpu_percent_per_core": rows_to_points(self._per_core, m),
            "ram_total_bytes": (self._system.ram_total_bytes if self._system is not None
                                else int(psutil.virtual_memory().total)),
            "ram_used_bytes": series["ram_used_bytes"],
            "ram_available_bytes": series["ram_available_bytes"],
            "page_cache_bytes": series["page_cache_bytes"],
            "disk_read_bytes_per_s": series["disk_read_bytes_per_s"],
            "disk": self._system.disk if self._system is not None else None,
            "shm_used_bytes": series["shm_used_bytes"],
            "processes": [fit_series(p, PROCESS_SERIES_HOW, m) for p in self._tracker.to_list()],
            "gpu": fit_series(gpu, _GPU_HOW, m) if (gpu := self._gpu.to_dict()) is not None else None,
            "absent": absent,
            "halvings": self.halvings,
            "sampler_overhead": {
                "ticks": self._ticks,
                "thread_cpu_s": round(self._thread_cpu_s, 6),
                "mean_tick_us": round(1e6 * self._thread_cpu_s / self._ticks, 1) if self._ticks else None,
                "worst_tick_us": round(1e6 * self._worst_tick_s, 1) if ticks else None,
            },
        }


# The machine-wide series: (attribute, key in the record, how a group of readings becomes one point; thinning.py).
_SYSTEM_SERIES = (("_t_s", "t_s", "last"), ("_ram_used", "ram_used_bytes", "max"),
                  ("_ram_avail", "ram_available_bytes", "min"), ("_cache", "page_cache_bytes", "max"),
                  ("_disk_rate", "disk_read_bytes_per_s", "mean"), ("_shm", "shm_used_bytes", "max"))
# The GPU series of the record by their keys in it (gpu.SERIES_HOW also names its attributes).
_GPU_HOW = {key: how for (_, key), how in GPU_SERIES_HOW.items()}
