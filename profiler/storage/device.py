"""What storage a path lives on: mount, filesystem, block device, whole disk, rotational, network or tmpfs.

Why: "reading is slow" means something different on a spinning disk (seeks: many small files hurt), an NVMe SSD
(rarely the limit), NFS (latency per file) and tmpfs (it is RAM). The report and the recommendations need those facts,
and the kernel throttle needs the MAJ:MIN of the *whole disk* (blkio limits are set per disk, not per partition).

Sources: ``/proc/self/mountinfo`` (longest mount-point prefix of the real path) and ``/sys/dev/block/MAJ:MIN``
(a partition's sysfs directory sits inside its disk's). Nothing here raises on odd setups (overlayfs, tmpfs,
device-mapper, containers without /sys): unknown facts are None.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any

#: Filesystem types whose data travels over a network. Why a list: the kernel has no "is remote" flag we can read;
#: these are the common network/cluster filesystems and FUSE network clients.
NETWORK_FS_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "beegfs", "gpfs", "9p", "afs",
    "ocfs2", "gfs2", "pvfs2", "orangefs", "davfs", "fuse.sshfs", "fuse.glusterfs", "fuse.ceph-fuse", "fuse.s3fs",
    "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "fuse.goofys", "fuse.blobfuse", "fuse.blobfuse2",
    "fuse.mountpoint-s3",
})

#: Filesystems that live in RAM: reads never touch a disk and eviction is impossible.
MEMORY_FS_TYPES = frozenset({"tmpfs", "ramfs", "devtmpfs"})

_SYS_DEV_BLOCK = "/sys/dev/block"
_SYS_BLOCK = "/sys/block"
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass
class StorageInfo:
    """Storage facts of one path. ``disk``/``maj_min`` are of the whole disk (what blkio throttles)."""

    path: str
    mount_point: str
    filesystem: str
    device: str | None
    disk: str | None
    maj_min: str | None
    rotational: bool | None
    model: str | None
    network: bool
    tmpfs: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MountEntry:
    """One line of /proc/self/mountinfo (fields we use), with escapes decoded."""

    maj_min: str
    root: str
    mount_point: str
    fstype: str
    source: str
    super_options: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\040, \\011, \\012, \\134."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def read_mountinfo(path: str = "/proc/self/mountinfo") -> list[MountEntry]:
    """Parse mountinfo; [] when unreadable. Lines that do not parse are skipped."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    entries: list[MountEntry] = []
    for line in lines:
        parts = line.split(" ")
        try:
            sep = parts.index("-", 6)  # optional fields (shared:N, master:N, ...) end at a lone "-"
            entries.append(MountEntry(maj_min=parts[2], root=_unescape(parts[3]), mount_point=_unescape(parts[4]),
                                      fstype=parts[sep + 1], source=_unescape(parts[sep + 2]),
                                      super_options=parts[sep + 3] if len(parts) > sep + 3 else ""))
        except (ValueError, IndexError):
            continue
    return entries


def find_mount(path: str, entries: list[MountEntry]) -> MountEntry | None:
    """The mount holding ``path`` (already a real path): the longest matching mount point; the last one on ties,
    because a later mount on the same point hides the earlier ones."""
    best: MountEntry | None = None
    for e in entries:
        mp = e.mount_point
        if path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best.mount_point):
                best = e
    return best


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _existing_ancestor(path: str) -> str:
    """``path`` itself, or its nearest existing parent: describe where a not-yet-created output dir would land."""
    p = path
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _block_facts(maj_min: str) -> dict[str, Any]:
    """Facts from /sys/dev/block/MAJ:MIN, resolving a partition to its disk; {} when there is no such block device."""
    sys_path = os.path.join(_SYS_DEV_BLOCK, maj_min)
    if not os.path.exists(sys_path):
        return {}
    real = os.path.realpath(sys_path)
    facts: dict[str, Any] = {}
    uevent = _read(os.path.join(real, "uevent")) or ""
    m = re.search(r"^DEVNAME=(.+)$", uevent, re.MULTILINE)
    facts["device"] = "/dev/" + (m.group(1) if m else os.path.basename(real))
    disk_dir = os.path.dirname(real) if os.path.exists(os.path.join(real, "partition")) else real
    disk = os.path.basename(disk_dir)
    facts["disk"] = disk
    facts["maj_min"] = _read(os.path.join(disk_dir, "dev"))
    rot = _read(os.path.join(_SYS_BLOCK, disk, "queue", "rotational"))
    facts["rotational"] = None if rot not in ("0", "1") else rot == "1"
    model = _read(os.path.join(_SYS_BLOCK, disk, "device", "model"))
    if not model:
        dm_name = _read(os.path.join(_SYS_BLOCK, disk, "dm", "name"))  # device-mapper: the LVM/crypt name
        if dm_name:
            model = f"device-mapper {dm_name}"
    if not model:
        # No model string (virtio, xen, mmc...): the driver name at least says "virtual disk". That matters because
        # virtio-blk reports rotational=1 by default whatever the host stores it on.
        driver = os.path.join(_SYS_BLOCK, disk, "device", "driver")
        if os.path.islink(driver):
            model = os.path.basename(os.path.realpath(driver))
    facts["model"] = model or None
    return facts


def describe_storage(path: str | os.PathLike[str]) -> StorageInfo:
    """Describe the storage under ``path``. Never raises; unknown facts are None (``filesystem`` "unknown")."""
    real = os.path.realpath(os.fspath(path))
    mount = find_mount(real, read_mountinfo())
    fstype = mount.fstype if mount else "unknown"
    info = StorageInfo(path=real, mount_point=mount.mount_point if mount else "", filesystem=fstype, device=None,
                       disk=None, maj_min=None, rotational=None, model=None,
                       network=fstype in NETWORK_FS_TYPES, tmpfs=fstype in MEMORY_FS_TYPES)
    if info.tmpfs or info.network:
        return info  # no local block device behind these
    candidates: list[str] = []
    if mount:
        candidates.append(mount.maj_min)
        if mount.source.startswith("/dev/"):
            # btrfs and some others report an anonymous 0:N in mountinfo; the source device node is the real one.
            try:
                rdev = os.stat(mount.source).st_rdev
                candidates.append(f"{os.major(rdev)}:{os.minor(rdev)}")
            except OSError:
                pass
    try:
        st_dev = os.stat(_existing_ancestor(real)).st_dev
        candidates.append(f"{os.major(st_dev)}:{os.minor(st_dev)}")
    except OSError:
        pass
    for mm in candidates:
        if mm.startswith("0:"):
            continue  # anonymous device (overlay, tmpfs, btrfs subvolume...): no /sys/dev/block entry
        facts = _block_facts(mm)
        if facts:
            for k, v in facts.items():
                setattr(info, k, v)
            break
    if info.device is None and mount and mount.source.startswith("/dev/"):
        info.device = mount.source
    return info
