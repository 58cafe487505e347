"""Per-process readings of the profiled job: the root (main) process and all its descendants.

The harness names DataLoader workers with `label`; any other descendant is a "child". Why per process: the
attribution needs each worker's CPU share, memory (RSS/PSS/USS: forked workers share pages copy-on-write, so RSS
overstates and PSS is the fair share) and bytes read (/proc/<pid>/io), and those live only in /proc/<pid>.

Cost notes (the sampler thread holds the GIL while it runs Python):
- Per process per tick: /proc/<pid>/stat (cpu times, rss) and /proc/<pid>/io, both kept open and re-read with
  pread (proc_readers.PidReader; ~50 µs per file cold instead of ~120 µs for open+read+close). psutil with oneshot() is
  the fallback where those files cannot be opened.
- memory_full_info (PSS/USS) reads smaps_rollup, for which the kernel walks the page tables of every mapping:
  measured 4.5 ms for a 290 MB worker and 7.5 ms for a 510 MB main process with torch imported, growing with RSS.
  Reading it for every process every few ticks would cost several % of a core, so it is budgeted: at most one
  process per tick, each process at most every `full_memory_every` ticks, and after a read costing c seconds of
  CPU the next one waits c / FULL_MEMORY_CPU_BUDGET. Ticks without a reading hold None.
- New children are found every `children_every` ticks by reading /proc/<pid>/task/<tid>/children of the processes
  already tracked (a few small files), not psutil's children(recursive=True), which reads /proc/*/stat of every
  process on the machine (~1 ms with 70 processes, far more on a busy host). Pids given to `label` are picked up
  on the next tick, so labelled workers are never late.
- CPU % is computed from cpu-time deltas ourselves (percent of one core; > 100 for a multi-threaded process);
  for a process first seen mid-run the first value is its average since it was created.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import psutil

from profiler.samplers.proc_readers import PidReader, ProcessGone
from profiler.samplers.thinning import halve

ROLES = ("main", "worker", "child")
# Share of one core that PSS/USS reads may use on average (see the module notes): 0.3 % keeps the whole sampler
# well under the 2 % throughput loss the tool allows itself on a 2-core machine, and still gives each of 3 processes
# a PSS reading every ~7 s at 7 ms per read: memory growth (copy-on-write creep) is slow enough for that.
FULL_MEMORY_CPU_BUDGET = 0.003
# The main process's first PSS/USS reading waits this long, and a run that ends sooner gets it when the sampler
# stops (ProcessTracker.final_main_reading). Why: it is the largest process (7-12 ms of smaps_rollup with torch
# imported, one tick's CPU thirty times over), its first reading says nothing a later one will not (its RSS is read
# every tick; copy-on-write growth is the workers'), and at one full period (0.5 s at 10 Hz) it landed inside a
# short measured window: 12 ms over the light benchmark's 1,000 batches was ~12 µs of every batch's cost there.
MAIN_FIRST_FULL_AFTER_S = 2.0


def _has_children_files() -> bool:
    """/proc/<pid>/task/<tid>/children needs CONFIG_PROC_CHILDREN (on in common distro kernels)."""
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def _children_from_proc(pid: int) -> set[int]:
    """Direct children of every thread of `pid` (workers are forked by whichever thread called iter())."""
    out: set[int] = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return out


#: How each per-process series is reduced to fewer points (thinning.py); the names are also the record's keys.
SERIES_HOW = {"t_s": "last", "cpu_percent": "mean", "rss_bytes": "max", "pss_bytes": "max", "uss_bytes": "max"}


@dataclass
class ProcessSeries:
    """Everything recorded about one process. A pid reused by a new process becomes a new entry (the kept-open
    /proc descriptors of the old one fail once it exits)."""

    pid: int
    role: str
    worker_id: int | None
    reader: PidReader | None = field(default=None, repr=False)  # fast path
    proc: psutil.Process | None = field(default=None, repr=False)  # PSS/USS, and fallback without the fast path
    alive: bool = True
    t_s: list[float] = field(default_factory=list)
    cpu_percent: list[float] = field(default_factory=list)
    rss_bytes: list[int] = field(default_factory=list)
    pss_bytes: list[int | None] = field(default_factory=list)
    uss_bytes: list[int | None] = field(default_factory=list)
    io: dict | None = None  # last cumulative /proc/<pid>/io values seen, kept after exit
    cpu_times: dict | None = None  # last cumulative user/system seconds seen, kept after exit
    prev_cpu_s: float | None = None
    prev_mono: float | None = None
    full_due: float = 0.0  # time.monotonic() from which a PSS/USS reading is due

    def release(self) -> None:
        self.alive = False
        if self.reader is not None:
            self.reader.close()
        self.reader = self.proc = None

    def halve(self) -> None:
        """Half the resolution (thinning.py): CPU % averaged over each pair of readings, memory at its peak."""
        for name, how in SERIES_HOW.items():
            setattr(self, name, halve(getattr(self, name), how))

    def to_dict(self, full_memory: bool) -> dict:
        return {
            "pid": self.pid,
            "role": self.role,
            "worker_id": self.worker_id,
            "t_s": list(self.t_s),
            "cpu_percent": list(self.cpu_percent),
            "rss_bytes": list(self.rss_bytes),
            "pss_bytes": list(self.pss_bytes) if full_memory else None,
            "uss_bytes": list(self.uss_bytes) if full_memory else None,
            "io": dict(self.io) if self.io is not None else None,
            "cpu_times": dict(self.cpu_times) if self.cpu_times is not None else None,
            "alive_at_end": self.alive,
        }


class ProcessTracker:
    """Tracks the root process and its descendants; `tick` runs on the sampler thread, `label` on any thread."""

    def __init__(self, root_pid: int, full_memory_every: int, children_every: int, interval_s: float) -> None:
        self.root_pid = root_pid
        self.full_memory_every = full_memory_every
        self.full_period_s = full_memory_every * interval_s
        self.children_every = max(1, children_every)
        self.absent: dict[str, str] = {}
        self.series: list[ProcessSeries] = []
        self._alive: dict[int, ProcessSeries] = {}
        self._full_next_allowed = 0.0
        self._lock = threading.Lock()
        self._labels: dict[int, tuple[str, int | None]] = {}
        self._pending: set[int] = set()
        self._children_files = _has_children_files()
        if full_memory_every <= 0:
            self.absent["pss"] = "full memory sampling disabled (full_memory_every <= 0)"

    # ---- called from any thread -------------------------------------------------------------------------------
    def label(self, pid: int, role: str, worker_id: int | None) -> None:
        """Name `pid`; may come before the pid is seen, while it runs, or after it exited."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        with self._lock:
            self._labels[pid] = (role, worker_id)
            self._pending.add(pid)

    def labels(self) -> dict[int, tuple[str, int | None]]:
        with self._lock:
            return dict(self._labels)

    # ---- sampler thread ---------------------------------------------------------------------------------------
    def _add(self, pid: int, role: str) -> ProcessSeries | None:
        reader = proc = None
        try:
            reader = PidReader(pid)
        except OSError:
            pass
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            if reader is None:
                return None
        if reader is not None and reader.io_error:
            self.absent.setdefault("proc_io", reader.io_error)
        label = self.labels().get(pid)
        entry = ProcessSeries(pid=pid, role=label[0] if label else role, worker_id=label[1] if label else None,
                              reader=reader, proc=proc)
        self.series.append(entry)
        self._alive[pid] = entry
        return entry

    def prime(self) -> None:
        """Start tracking the root and take its CPU baseline, so its first tick covers one interval."""
        entry = self._add(self.root_pid, "main")
        if entry is None:
            self.absent["processes"] = f"root process {self.root_pid} not found"
            return
        entry.role = "main"
        # Its first PSS/USS reading waits MAIN_FIRST_FULL_AFTER_S (see there), at least one full period.
        entry.full_due = time.monotonic() + max(self.full_period_s, MAIN_FIRST_FULL_AFTER_S)
        try:
            user, system, *_ = self._read(entry)
            entry.prev_cpu_s, entry.prev_mono = user + system, time.monotonic()
        except (ProcessGone, psutil.Error):
            pass
        self._discover()

    def final_main_reading(self) -> None:
        """At the sampler's stop (the run's end, outside its measured steps): a main process that had no PSS/USS
        reading yet gets one, in its last tick's place, so a short run reports it too (MAIN_FIRST_FULL_AFTER_S)."""
        if self.full_memory_every <= 0:
            return
        e = self._alive.get(self.root_pid)
        if e is None or e.proc is None or not e.pss_bytes or any(v is not None for v in e.pss_bytes):
            return
        pss, uss = self._full_memory(e)
        if pss is not None or uss is not None:
            e.pss_bytes[-1], e.uss_bytes[-1] = pss, uss

    def _parent_tracked(self, pid: int) -> bool:
        """A labelled pid is taken only if its parent is ours: a label that arrives after the worker exited must
        not attach to an unrelated process that has reused the pid."""
        try:
            return psutil.Process(pid).ppid() in self._alive
        except psutil.Error:
            return False

    def _discover(self) -> None:
        """Add descendants not yet tracked (breadth first through the tracked tree), and pending labelled pids."""
        with self._lock:
            pending, self._pending = self._pending, set()
        for pid in pending:
            if pid not in self._alive and self._parent_tracked(pid):
                self._add(pid, "child")
        if self._children_files:
            queue = list(self._alive)
            seen = set(queue)
            while queue:
                for child in _children_from_proc(queue.pop()):
                    if child not in seen:
                        seen.add(child)
                        queue.append(child)
                        if child not in self._alive:
                            self._add(child, "child")
            return
        root = self._alive.get(self.root_pid)
        if root is not None and root.proc is not None:
            try:
                kids = root.proc.children(recursive=True)
            except psutil.Error:
                kids = []
            for kid in kids:
                if kid.pid not in self._alive:
                    self._add(kid.pid, "child")

    def tick(self, tick_index: int, t_s: float) -> None:
        with self._lock:
            have_pending = bool(self._pending)
        if have_pending or tick_index % self.children_every == 0:
            self._discover()
        full_for = self._pick_full()
        for pid, entry in list(self._alive.items()):
            if not self._sample(entry, t_s, entry is full_for):
                entry.release()
                del self._alive[pid]

    def halve(self) -> None:
        """Every process's series at half the resolution (the sampler's thinning, thinning.py)."""
        for entry in self.series:
            entry.halve()

    def close(self) -> None:
        """Release kept-open descriptors (end of run); entries keep their data."""
        for entry in self._alive.values():
            if entry.reader is not None:
                entry.reader.close()
                entry.reader = None

    def _pick_full(self) -> ProcessSeries | None:
        """The one process (most overdue) that gets a PSS/USS reading this tick, if the CPU budget allows."""
        if self.full_memory_every <= 0:
            return None
        now = time.monotonic()
        if now < self._full_next_allowed:
            return None
        due = [e for e in self._alive.values() if e.full_due <= now and e.proc is not None]
        return min(due, key=lambda e: e.full_due) if due else None

    @staticmethod
    def _read(e: ProcessSeries) -> tuple[float, float, int, float, dict | None]:
        """(user s, system s, rss, age s, io) via the fast path, else psutil; raises ProcessGone/psutil errors."""
        if e.reader is not None:
            return e.reader.read()
        if e.proc is None:
            raise ProcessGone(e.pid)
        with e.proc.oneshot():
            ct = e.proc.cpu_times()
            rss = int(e.proc.memory_info().rss)
            age = time.time() - e.proc.create_time()
            try:
                c = e.proc.io_counters()
                io = {"rchar": int(c.read_chars), "read_bytes": int(c.read_bytes)}
            except (psutil.AccessDenied, AttributeError):
                io = None
        return ct.user, ct.system, rss, age, io

    def _full_memory(self, e: ProcessSeries) -> tuple[int | None, int | None]:
        """(pss, uss) from memory_full_info; also charges its CPU cost against the budget."""
        proc = e.proc
        if proc is None:  # _pick_full picks only processes psutil holds
            return None, None
        cost0 = time.thread_time()
        try:
            fm = proc.memory_full_info()
            pss = int(getattr(fm, "pss", 0)) or None
            if pss is None:
                self.absent.setdefault("pss", "memory_full_info has no pss on this platform")
            return pss, int(fm.uss)
        except psutil.AccessDenied as exc:
            self.absent.setdefault("pss", f"smaps not readable: {exc}")
            return None, None
        except psutil.Error:
            return None, None
        finally:
            mono = time.monotonic()
            e.full_due = mono + self.full_period_s
            self._full_next_allowed = mono + (time.thread_time() - cost0) / FULL_MEMORY_CPU_BUDGET

    def _sample(self, e: ProcessSeries, t_s: float, full: bool) -> bool:
        """Append one reading to `e`; False when the process has gone (nothing appended then)."""
        try:
            user, system, rss, age, io = self._read(e)
        except (ProcessGone, psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            self.absent.setdefault("processes", f"process {e.pid} not readable (access denied)")
            return False
        if io is not None:
            e.io = io
        e.cpu_times = {"user_s": round(user, 3), "system_s": round(system, 3)}
        if rss == 0:  # a user process without memory is exiting (its mm is gone): keep the final io, no sample
            return False
        now = time.monotonic()
        pss, uss = self._full_memory(e) if full else (None, None)
        cpu_s = user + system
        if e.prev_cpu_s is not None and e.prev_mono is not None and now > e.prev_mono:
            pct = 100.0 * (cpu_s - e.prev_cpu_s) / (now - e.prev_mono)
        else:  # first sight mid-run: average since the process was created
            pct = 100.0 * cpu_s / age if age > 0 else 0.0
        e.prev_cpu_s, e.prev_mono = cpu_s, now
        e.t_s.append(t_s)
        e.cpu_percent.append(round(max(0.0, pct), 1))
        e.rss_bytes.append(rss)
        e.pss_bytes.append(pss)
        e.uss_bytes.append(uss)
        return True

    def to_list(self) -> list[dict]:
        """The `samples.processes` list; labels given at any time (even after exit) are applied here."""
        labels = self.labels()
        full = self.full_memory_every > 0
        out = []
        for e in self.series:
            if e.pid in labels and e.pid != self.root_pid:
                e.role, e.worker_id = labels[e.pid]
            if e.alive and e.reader is None and e.proc is not None:  # exited since the last tick?
                try:
                    e.alive = e.proc.status() != psutil.STATUS_ZOMBIE
                except psutil.Error:
                    e.alive = False
            if not e.t_s:
                continue  # gone before its first reading: nothing was seen
            out.append(e.to_dict(full))
        return out
