"""Finding the images of a dataset folder, and the built-in sample dataset.

Two layouts are accepted: an ImageFolder tree (one sub-folder per class, labels = sorted folder names) and a flat or
arbitrarily nested folder of images (label 0 for all). Which one is decided by the first level: if the images live in
sub-folders and none at the top, the sub-folders are classes.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import IMAGE_EXTENSIONS
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

    def to_dict(self) -> dict:
        return {"root": self.root, "files": len(self.files), "classes": len(self.classes), "layout": self.layout,
                "total_bytes": self.total_bytes}


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def scan_dataset(root: str | os.PathLike) -> DatasetIndex:
    """List the images under ``root``; UserError if the folder is missing or holds none."""
    path = Path(root)
    if not path.exists():
        raise UserError(f"--data {root}: no such directory")
    if not path.is_dir():
        raise UserError(f"--data {root}: not a directory")
    top_images = []
    subdirs = []
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except PermissionError:
        raise UserError(f"--data {root}: permission denied") from None
    for e in entries:
        if e.is_dir(follow_symlinks=True) and not e.name.startswith("."):
            subdirs.append(e)
        elif e.is_file() and _is_image(e.name):
            top_images.append(e.path)
    files: list[str] = []
    labels: list[int] = []
    classes: list[str] = []
    if subdirs and not top_images:
        layout = "imagefolder"
        for ci, d in enumerate(subdirs):
            classes.append(d.name)
            for f in _walk_images(d.path):
                files.append(f)
                labels.append(ci)
        # Drop class folders without images so labels stay dense.
        used = sorted(set(labels))
        if len(used) != len(classes):
            remap = {old: new for new, old in enumerate(used)}
            classes = [classes[i] for i in used]
            labels = [remap[l] for l in labels]
    else:
        layout = "flat"
        files = list(_walk_images(str(path)))
        labels = [0] * len(files)
        classes = ["all"]
    if not files:
        raise UserError(f"--data {root}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)})")
    total = 0
    for f in files:
        try:
            total += os.stat(f).st_size
        except OSError:
            pass
    return DatasetIndex(str(path.resolve()), files, labels, classes, layout, total)


def _walk_images(top: str):
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if _is_image(name) and not name.startswith("."):
                yield os.path.join(dirpath, name)


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


def synthetic_jpeg(rng: np.random.Generator, size: tuple[int, int] = SAMPLE_SIZE, quality: int = SAMPLE_QUALITY) -> bytes:
    """One photo-like JPEG: smooth large-scale structure, mid-frequency texture and sensor-like noise.

    Pure noise would compress badly and decode unrealistically slowly; flat colour would be far too small. Layering
    three scales gives ~60-120 KB at 500x375 q90, in the range of real ImageNet photos.
    """
    from PIL import Image

    w, h = size
    base = rng.integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC), dtype=np.float32)
    mid = rng.integers(0, 256, size=(h // 12, w // 12, 3), dtype=np.uint8)
    img += (np.asarray(Image.fromarray(mid).resize((w, h), Image.BILINEAR), dtype=np.float32) - 128) * 0.35
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
