"""Finding the images of a dataset folder, and the built-in sample dataset.

Two layouts are accepted: an ImageFolder tree (one sub-folder per class, labels = sorted folder names) and a flat or
arbitrarily nested folder of images (label 0 for all). Which one is decided by the first level: if the images live in
sub-folders and none at the top, the sub-folders are classes.
"""
from __future__ import annotations

import errno
import io
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..config import IMAGE_EXTENSIONS, MAX_FILE_BYTES, MAX_SCAN_ENTRIES
from ..errors import UserError

# Sample dataset: ~500x375 (the median ImageNet image), JPEG quality 90, 1,000+ images in 10 classes.
SAMPLE_COUNT = 1000
SAMPLE_CLASSES = 10
SAMPLE_SIZE = (500, 375)
SAMPLE_QUALITY = 90
SAMPLE_VERSION = "1"  # bump when the generator changes so cached copies are rebuilt


@dataclass
class DatasetIndex:
    root: str
    files: list[str]
    labels: list[int]
    classes: list[str]
    layout: str  # "imagefolder" | "flat"
    total_bytes: int
    # Entries with an image name that are not readable images files (FIFOs, sockets, devices, links to them, broken or
    # looping links) and folders not scanned (cycles, permission denied): (path, reason), for the record's skip list.
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"root": self.root, "files": len(self.files), "classes": len(self.classes), "layout": self.layout,
                "total_bytes": self.total_bytes}


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


# Kernel filesystems whose "files" are live views (endless, blocking or recursive), never a dataset: /proc/self alone
# links back into the whole process tree. Refused by path and by filesystem type (a container may mount them elsewhere).
_VIRTUAL_PREFIXES = ("/proc", "/sys", "/dev")
_VIRTUAL_FS_TYPES = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                               "securityfs", "configfs", "bpf", "pstore", "efivarfs", "fusectl", "mqueue", "hugetlbfs",
                               "binfmt_misc", "autofs", "rpc_pipefs", "nsfs"})


def _virtual_place(real: str) -> str | None:
    """Why ``real`` (a resolved path) is a kernel filesystem and not data, or None."""
    for prefix in _VIRTUAL_PREFIXES:
        if real == prefix or real.startswith(prefix + "/"):
            return f"is under {prefix}, a kernel filesystem, not a dataset"
    from ..storage.device import find_mount, read_mountinfo

    try:
        mount = find_mount(real, read_mountinfo())
    except Exception:  # no mountinfo (not Linux, restricted /proc): the prefix check above is all we can do
        return None
    if mount is not None and mount.fstype in _VIRTUAL_FS_TYPES:
        return f"is on a {mount.fstype} filesystem (kernel state), not a dataset"
    return None


def _special_reason(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a file: reading it would wait forever"
    if stat.S_ISSOCK(mode):
        return "a socket, not a file"
    if stat.S_ISCHR(mode):
        return "a character device, not a file"
    if stat.S_ISBLK(mode):
        return "a block device, not a file"
    return "not a regular file"


class _Scan:
    """State of one scan: entries seen (bounded), folders visited (cycle detection) and what was skipped."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.entries = 0
        self.visited: set[tuple[int, int]] = set()
        self.skipped: list[tuple[str, str]] = []

    def count(self, n: int) -> None:
        self.entries += n
        if self.entries > MAX_SCAN_ENTRIES:
            raise UserError(f"--data {self.root}: more than {MAX_SCAN_ENTRIES:,} files and folders; point --data at "
                            f"a part of the dataset")

    def enter(self, path: str, st: os.stat_result) -> bool:
        """True the first time a folder (by device and inode) is seen; a link back to it is skipped and listed."""
        key = (st.st_dev, st.st_ino)
        if key in self.visited:
            self.skipped.append((path, "folder link to a folder already scanned (a cycle or a duplicate): not "
                                       "scanned twice"))
            return False
        self.visited.add(key)
        return True

    def list_dir(self, d: str) -> tuple[list[tuple[str, int]], list[str]]:
        """(images as (path, size), sub-folders) of one folder, sorted by name; hidden entries ignored."""
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            if d == self.root:
                raise UserError(f"--data {d}: cannot list it ({err.strerror or err})") from None
            self.skipped.append((d, f"folder not scanned: {err.strerror or err}"))
            return [], []
        self.count(len(entries))
        images: list[tuple[str, int]] = []
        subdirs: list[str] = []
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                st = e.stat()  # follows links; cached by scandir for plain entries
            except OSError as err:
                if _is_image(e.name):
                    self.skipped.append((e.path, "a link that loops" if err.errno == errno.ELOOP else
                                         "a broken link" if isinstance(err, FileNotFoundError) else
                                         f"cannot stat: {err.strerror}"))
                continue
            if stat.S_ISDIR(st.st_mode):
                if self.enter(e.path, st):
                    subdirs.append(e.path)
            elif _is_image(e.name):
                if not stat.S_ISREG(st.st_mode):
                    self.skipped.append((e.path, _special_reason(st.st_mode)))
                elif e.is_symlink() and (why := _virtual_place(os.path.realpath(e.path))):
                    self.skipped.append((e.path, f"a link to a file that {why}"))
                elif st.st_size == 0:  # knowable now: listed even when no batch would have drawn it
                    self.skipped.append((e.path, "empty file (0 bytes)"))
                else:
                    images.append((e.path, st.st_size))
        return images, subdirs


def scan_dataset(root: str | os.PathLike) -> DatasetIndex:
    """List the images under ``root``; UserError (one line) if it is missing, not a folder, or holds none.

    Files that are not regular files (FIFOs, sockets, devices, links to them) are skipped and listed in ``skipped``,
    never opened; a folder reached twice (a link to ``.`` or to a parent) is scanned once; kernel filesystems
    (/proc, /sys, /dev) are refused up front and the scan stops beyond MAX_SCAN_ENTRIES.
    """
    text = os.fspath(root)
    if not text or not text.strip():
        raise UserError("--data is empty; leave it out to use the built-in sample dataset")
    if "\0" in text:
        raise UserError("--data contains a NUL character")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise UserError(f"--data {text}: no such directory") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"--data {text}: a symbolic link loop, not a directory") from None
        if isinstance(e, PermissionError):
            raise UserError(f"--data {text}: permission denied") from None
        raise UserError(f"--data {text}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"--data {text}: not a directory")
    real = os.path.realpath(text)
    why = _virtual_place(real)
    if why:
        raise UserError(f"--data {text}: {why}")
    scan = _Scan(text)
    scan.enter(text, st)
    top_images, subdirs = scan.list_dir(text)
    pairs: list[tuple[str, int]] = []
    labels: list[int] = []
    classes: list[str] = []
    if subdirs and not top_images:
        layout = "imagefolder"
        for ci, d in enumerate(subdirs):
            classes.append(os.path.basename(d))
            for item in _walk(d, scan):
                pairs.append(item)
                labels.append(ci)
        # Drop class folders without images so labels stay dense.
        used = sorted(set(labels))
        if len(used) != len(classes):
            remap = {old: new for new, old in enumerate(used)}
            classes = [classes[i] for i in used]
            labels = [remap[lab] for lab in labels]
    else:
        layout = "flat"
        pairs = top_images + [item for d in subdirs for item in _walk(d, scan)]
        labels = [0] * len(pairs)
        classes = ["all"]
    if not pairs:
        extra = (f"; skipped {len(scan.skipped)} that are empty or not regular files (first: "
                 f"{scan.skipped[0][0]}: {scan.skipped[0][1]})" if scan.skipped else "")
        raise UserError(f"--data {text}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)}){extra}")
    files = [p for p, _ in pairs]
    total = sum(size for _, size in pairs)
    return DatasetIndex(real, files, labels, classes, layout, total, scan.skipped)


def _walk(top: str, scan: _Scan):
    """Images under ``top`` (already entered) in os.walk's top-down sorted order; iterative, so depth is no limit."""
    stack = [top]
    while stack:
        d = stack.pop()
        images, subdirs = scan.list_dir(d)
        yield from images
        stack.extend(reversed(subdirs))


def bounded_read(f: BinaryIO, limit: int = MAX_FILE_BYTES) -> bytes:
    """Read a whole file, but never more than ``limit`` bytes: OSError (EFBIG) beyond, with a reason for the skip list.

    Why: a path that turns out to be a device (a link to /dev/zero) or a file that grows without end would otherwise
    be read until the worker runs out of memory. Non-regular files are refused before reading. Reads the size the
    file reports plus one byte first (one read for a normal file), then continues in chunks only if it grew.
    """
    try:
        st = os.fstat(f.fileno())
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, _special_reason(st.st_mode))
    first = min(st.st_size, limit) + 1 if st is not None and st.st_size > 0 else _READ_CHUNK
    chunks = [f.read(first)]
    total = len(chunks[0])
    while total <= limit and chunks[-1]:
        if st is not None and 0 < total < first:
            break  # a short read of a regular file: end of file
        chunk = f.read(min(_READ_CHUNK, limit + 1 - total))
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise OSError(errno.EFBIG, f"larger than the {limit:,}-byte limit for one file")
    return b"".join(chunks) if len(chunks) > 1 else chunks[0]


# Chunk size for files whose size is unknown or grew: 1 MiB keeps syscalls few and the overshoot small.
_READ_CHUNK = 1 << 20


def default_sample_dir() -> Path:
    """Where the built-in sample dataset lives: ``datasets/sample`` of a source checkout, else the user cache.

    PROFILER_SAMPLE_DIR overrides both (tests use it to keep their data in tmp dirs).
    """
    env = os.environ.get("PROFILER_SAMPLE_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").exists() and (repo / "datasets").is_dir():
        return repo / "datasets" / "sample"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "profiler" / "sample"


def synthetic_jpeg(rng: np.random.Generator, size: tuple[int, int] = SAMPLE_SIZE,
                   quality: int = SAMPLE_QUALITY) -> bytes:
    """One photo-like JPEG: smooth large-scale structure, mid-frequency texture and sensor-like noise.

    Pure noise would compress badly and decode unrealistically slowly; flat color would be far too small. Layering
    three scales gives ~60-120 KB at 500x375 q90, in the range of real ImageNet photos.
    """
    from PIL import Image

    w, h = size
    base = rng.integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.Resampling.BICUBIC), dtype=np.float32)
    mid = rng.integers(0, 256, size=(h // 12, w // 12, 3), dtype=np.uint8)
    img += (np.asarray(Image.fromarray(mid).resize((w, h), Image.Resampling.BILINEAR), dtype=np.float32) - 128) * 0.35
    img += rng.normal(0, 9, size=(h, w, 3)).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def make_sample_dataset(target: str | os.PathLike, count: int = SAMPLE_COUNT, classes: int = SAMPLE_CLASSES,
                        size: tuple[int, int] = SAMPLE_SIZE, seed: int = 0, progress=None) -> Path:
    """Write ``count`` synthetic JPEGs in ``classes`` class folders; idempotent (a marker records completion)."""
    target = Path(target)
    marker = target / ".complete"
    stamp = f"{SAMPLE_VERSION} {count} {classes} {size[0]}x{size[1]} {seed}"
    if marker.exists() and marker.read_text().strip() == stamp:
        return target
    rng = np.random.default_rng(seed)
    for c in range(classes):
        (target / f"class_{c:02d}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        # +-15 % size jitter, as real datasets are not all one shape.
        jw = int(size[0] * rng.uniform(0.85, 1.15))
        jh = int(size[1] * rng.uniform(0.85, 1.15))
        data = synthetic_jpeg(rng, (jw, jh))
        (target / f"class_{i % classes:02d}" / f"img_{i:05d}.jpg").write_bytes(data)
        if progress is not None:
            progress(i + 1, count)
    marker.write_text(stamp + "\n")
    return target


def ensure_sample_dataset(progress=None) -> Path:
    target = default_sample_dir()
    try:
        return make_sample_dataset(target, progress=progress)
    except OSError as e:
        raise UserError(f"cannot create the sample dataset in {target}: {e.strerror or e}") from None
