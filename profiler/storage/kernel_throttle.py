"""Real slow storage: the kernel's block-I/O throttle, applied to this process and the workers it forks.

Why the kernel and not sleeps: the block layer throttles the reads that actually reach the disk (page-cache hits are
free, readahead is counted), so cold/warm behaviour, readahead and file layout stay real. Needs root.

How: make a cgroup, set read limits for the whole disk (MAJ:MIN from device.describe_storage), move the current process
in. DataLoader workers started afterwards (fork or spawn) inherit the cgroup. On exit - also on exceptions, Ctrl-C,
SIGTERM and SIGHUP (entering installs profiler.signals' handlers, which turn those into exceptions) and at interpreter
exit if the context was never left (atexit) - every process still in it goes back to where this process came from and
the cgroup is removed. A run killed with SIGKILL leaves ``profiler-<pid>`` behind; ``cleanup_stale()``, called on
every enter, removes those of processes that no longer exist.

cgroup v1 (``blkio.throttle.read_{bps,iops}_device``) is preferred when mounted: it changes only the blkio hierarchy,
so memory/cpu limits of the process stay exactly as they were. On pure cgroup v2 (``io.max``) a cgroup cannot hold
processes and children with controllers at once, so we create a *sibling* of the current cgroup and copy its memory,
pids and cpu limits over (ancestors' limits still apply). The v2 path is written from the kernel documentation and is
not exercised by the tests on a v1 machine.
"""
from __future__ import annotations

import atexit
import errno
import os
import re
import time
import warnings
from types import TracebackType

from profiler import signals
from profiler.signals import deferred as _deferred_signals
from profiler.storage.device import read_mountinfo
from profiler.storage.spec import ThrottleSpec

V1 = "cgroup-v1-blkio"
V2 = "cgroup-v2-io.max"
_NAME_RE = re.compile(r"^profiler-(\d+)(?:-\d+)?$")
_MAJ_MIN_RE = re.compile(r"^\d+:\d+$")
#: How long exit waits for the cgroup to empty before giving up. Why: exiting tasks leave a cgroup asynchronously
#: (a few ms); a second is generous and still does not hold up Ctrl-C noticeably.
_RMDIR_WAIT_S = 1.0
#: v2 limits copied into the sibling cgroup so moving there does not lift the current cgroup's own limits.
_V2_COPIED_LIMITS = ("memory.max", "memory.high", "memory.swap.max", "pids.max", "cpu.max", "cpu.weight")


class KernelThrottleError(RuntimeError):
    """The kernel throttle could not be set up; the message says why (one line)."""


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(path: str, text: str) -> None:
    # One write() per value: cgroup files parse each write separately.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _v1_blkio() -> tuple[str, str] | None:
    """(mount point, current cgroup dir) of the v1 blkio hierarchy when it has the throttle files, else None."""
    mount = next((e for e in read_mountinfo()
                  if e.fstype == "cgroup" and "blkio" in e.super_options.split(",")), None)
    if mount is None or not os.path.exists(os.path.join(mount.mount_point, "blkio.throttle.read_bps_device")):
        return None
    rel = "/"
    try:
        for line in _read("/proc/self/cgroup").splitlines():
            _, controllers, path = line.split(":", 2)
            if "blkio" in controllers.split(","):
                rel = path
    except (OSError, ValueError):
        pass
    return mount.mount_point, _join_cgroup(mount.mount_point, mount.root, rel)


def _v2_unified() -> tuple[str, str] | None:
    """(mount point, current cgroup dir) of the v2 hierarchy when the io controller is available there, else None."""
    mount = next((e for e in read_mountinfo() if e.fstype == "cgroup2"), None)
    if mount is None:
        return None
    try:
        if "io" not in _read(os.path.join(mount.mount_point, "cgroup.controllers")).split():
            return None
        rel = next(line[3:] for line in _read("/proc/self/cgroup").splitlines() if line.startswith("0::"))
    except (OSError, StopIteration):
        return None
    return mount.mount_point, _join_cgroup(mount.mount_point, mount.root, rel)


def _join_cgroup(mount_point: str, mount_root: str, cgroup_path: str) -> str:
    """Directory of ``cgroup_path`` (from /proc/self/cgroup) under a mount whose root is ``mount_root``."""
    if mount_root != "/" and cgroup_path.startswith(mount_root):
        cgroup_path = cgroup_path[len(mount_root):]
    return os.path.normpath(os.path.join(mount_point, cgroup_path.lstrip("/")))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _procs(cg_dir: str) -> list[int]:
    try:
        return [int(x) for x in _read(os.path.join(cg_dir, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def _evacuate_and_remove(cg_dir: str, target_dir: str, first_pid: int | None = None) -> bool:
    """Move every process in ``cg_dir`` to ``target_dir`` and rmdir it; True when it is gone."""
    deadline = time.monotonic() + _RMDIR_WAIT_S
    pids = ([first_pid] if first_pid else []) + _procs(cg_dir)
    while True:
        for pid in pids:
            try:
                _write(os.path.join(target_dir, "cgroup.procs"), str(pid))
            except OSError:
                pass  # exited meanwhile (ESRCH) or a zombie: it leaves on its own
        try:
            os.rmdir(cg_dir)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        time.sleep(0.02)
        pids = _procs(cg_dir)


class KernelThrottle:
    """Context manager: throttle reads of this process (and children forked inside) from disk ``maj_min``.

    ``mechanism`` is "cgroup-v1-blkio" or "cgroup-v2-io.max" (None when neither is usable; entering then raises).
    """

    def __init__(self, spec: ThrottleSpec, maj_min: str) -> None:
        if not _MAJ_MIN_RE.match(maj_min or ""):
            raise ValueError(f"maj_min must look like '254:0', got {maj_min!r}")
        self.spec = spec
        self.maj_min = maj_min
        self.mechanism: str | None = V1 if _v1_blkio() else (V2 if _v2_unified() else None)
        self.cgroup_dir: str | None = None
        self._origin_dir: str | None = None
        self._taken_signals: list[int] = []

    @staticmethod
    def available(spec: ThrottleSpec, maj_min: str | None) -> tuple[bool, str]:
        """(usable?, reason) without changing anything: root, a real block device, a cgroup throttle interface."""
        if os.geteuid() != 0:
            return False, "kernel throttle needs root (it writes cgroup files)"
        if not maj_min or not _MAJ_MIN_RE.match(maj_min):
            return False, "the data is not on a local block device (no MAJ:MIN to throttle)"
        if not os.path.exists(f"/sys/dev/block/{maj_min}"):
            return False, f"no block device {maj_min} in /sys/dev/block"
        if spec.bytes_per_s is None and spec.iops is None:
            return False, "the throttle spec sets no limit"
        v1 = _v1_blkio()
        if v1:
            return True, f"{V1} under {v1[0]}"
        v2 = _v2_unified()
        if v2:
            return True, f"{V2} under {v2[0]}"
        return False, "no cgroup v1 blkio throttle and no cgroup v2 io controller on this machine"

    # -- enter / exit -------------------------------------------------------------------------------------------
    def __enter__(self) -> KernelThrottle:
        ok, reason = self.available(self.spec, self.maj_min)
        if not ok:
            raise KernelThrottleError(reason)
        if self.cgroup_dir is not None:
            raise KernelThrottleError("this KernelThrottle is already active")
        cleanup_stale()
        # SIGTERM/SIGHUP must run __exit__ like Ctrl-C does, or the cgroup outlives us with its limit set.
        self._taken_signals = signals.install()
        with _deferred_signals():
            atexit.register(self._undo)  # a caller that never leaves the context (or an exception in a thread)
            try:
                if self.mechanism == V1:
                    self._enter_v1()
                else:
                    self._enter_v2()
            except BaseException as e:
                self._undo()
                signals.restore(self._taken_signals)
                self._taken_signals = []
                if isinstance(e, OSError):
                    raise KernelThrottleError(
                        f"could not set up {self.mechanism} throttle for {self.maj_min}: {e}") from e
                raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            with _deferred_signals():
                self._undo()
        finally:
            # Handlers we installed only for our lifetime go back (not those the CLI installed for the whole run).
            signals.restore(self._taken_signals)
            self._taken_signals = []

    def _make_dir(self, parent: str) -> str:
        base = f"profiler-{os.getpid()}"
        for k in range(100):
            path = os.path.join(parent, base if k == 0 else f"{base}-{k}")
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue
        raise KernelThrottleError(f"too many {base}* cgroups in {parent}")

    def _enter_v1(self) -> None:
        v1 = _v1_blkio()
        assert v1 is not None
        self._origin_dir = v1[1]
        # A child of our own blkio cgroup: any limit already set above us keeps applying (v1 is hierarchical here).
        self.cgroup_dir = self._make_dir(self._origin_dir)
        if self.spec.bytes_per_s:
            _write(os.path.join(self.cgroup_dir, "blkio.throttle.read_bps_device"),
                   f"{self.maj_min} {self.spec.bytes_per_s}")
        if self.spec.iops:
            _write(os.path.join(self.cgroup_dir, "blkio.throttle.read_iops_device"), f"{self.maj_min} {self.spec.iops}")
        _write(os.path.join(self.cgroup_dir, "cgroup.procs"), str(os.getpid()))

    def _enter_v2(self) -> None:
        v2 = _v2_unified()
        assert v2 is not None
        mount, current = v2
        self._origin_dir = current
        parent = current if current == mount else os.path.dirname(current)
        control = os.path.join(parent, "cgroup.subtree_control")
        if "io" not in _read(control).split():
            _write(control, "+io")  # fails (EBUSY) when parent itself holds processes: then we cannot throttle
        self.cgroup_dir = self._make_dir(parent)
        if current != parent:
            for name in _V2_COPIED_LIMITS:
                src, dst = os.path.join(current, name), os.path.join(self.cgroup_dir, name)
                if os.path.exists(src) and os.path.exists(dst):
                    try:
                        _write(dst, _read(src).strip())
                    except OSError:
                        pass
        limits = []
        if self.spec.bytes_per_s:
            limits.append(f"rbps={self.spec.bytes_per_s}")
        if self.spec.iops:
            limits.append(f"riops={self.spec.iops}")
        _write(os.path.join(self.cgroup_dir, "io.max"), f"{self.maj_min} {' '.join(limits)}")
        _write(os.path.join(self.cgroup_dir, "cgroup.procs"), str(os.getpid()))

    def _undo(self) -> None:
        """Move every process back to the origin cgroup and remove ours. Idempotent; also the atexit hook."""
        atexit.unregister(self._undo)
        if self.cgroup_dir is None:
            return
        cg, origin = self.cgroup_dir, self._origin_dir or os.path.dirname(self.cgroup_dir)
        self.cgroup_dir = None
        if not _evacuate_and_remove(cg, origin, first_pid=os.getpid()):
            warnings.warn(f"could not remove throttle cgroup {cg}; cleanup_stale() will remove it later",
                          RuntimeWarning, stacklevel=3)


def cleanup_stale() -> list[str]:
    """Remove ``profiler-<pid>`` cgroups left by processes that no longer exist. Returns the removed paths.

    Processes still inside one (orphaned workers) are moved to its parent first. Without root this does nothing.
    """
    if os.geteuid() != 0:
        return []
    parents: set[str] = set()
    for found in (_v1_blkio(), _v2_unified()):
        if found:
            mount, current = found
            parents.update({mount, current})
            if current != mount:
                parents.add(os.path.dirname(current))  # v2 puts its cgroup next to the current one
    removed = []
    for parent in sorted(parents):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            m = _NAME_RE.match(name)
            path = os.path.join(parent, name)
            if not m or not os.path.isdir(path) or _pid_alive(int(m.group(1))):
                continue
            if _evacuate_and_remove(path, parent):
                removed.append(path)
    return removed
