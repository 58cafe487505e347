"""Which loader is profiled, what a batch holds, where a loader was made: in-process, real DataLoaders, no libraries.

The framework jobs (test_frameworks.py) check the same on real Lightning/HF/timm/webdataset code; these pin the
rules themselves, fast.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from profiler.errors import UserError
from profiler.instrument.collect import samples_per_call
from profiler.instrument.loaders import LoaderSelector, count_samples, is_data_folder
from profiler.instrument.session import Session

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Pair:
    image: torch.Tensor
    label: torch.Tensor


class WithAttrs:
    def __init__(self, n: int) -> None:
        self.pixel_values = torch.zeros(n, 3, 4, 4)
        self.name = "batch"


@pytest.mark.parametrize("batch, hint, want", [
    ((torch.zeros(7, 3, 8, 8), torch.zeros(7)), 8, (7, "batch")),  # a short last batch: 7, not batch_size 8
    ({"input_ids": torch.zeros(5, 12), "attention_mask": torch.zeros(5, 12), "labels": torch.zeros(5)}, None,
     (5, "batch")),
    ([torch.zeros(16, 32), [torch.zeros(16)]], None, (16, "batch")),  # nested
    (Pair(torch.zeros(4, 3), torch.zeros(4)), None, (4, "batch")),
    (WithAttrs(6), None, (6, "batch")),
    ({"x": np.zeros((9, 2))}, None, (9, "batch")),
    ([(torch.zeros(3), 1), (torch.zeros(3), 2)], 2, (2, "batch length")),  # uncollated samples
    ([torch.zeros(3, 8, 8) for _ in range(4)], 4, (4, "batch length")),  # a list of 4 image samples
    ([torch.zeros(4, 3), torch.zeros(4, 3)], 4, (4, "batch")),  # a collated (x, target) pair
    ("text", None, None),
    (torch.tensor(3.0), None, None),
])
def test_count_samples(batch, hint, want):
    assert count_samples(batch, hint) == want


def test_count_samples_is_bounded_on_a_huge_nested_batch():
    batch = {"x": [[torch.zeros(2)] * 1000] * 1000}
    assert count_samples(batch, None) == (2, "batch")
    assert count_samples([[torch.zeros(2)] * 10] * 100_000, None) == (100_000, "batch length")


def test_samples_per_call_shares_the_batch_count():
    assert samples_per_call(np.array([1, 1]), 32, 2).tolist() == [16, 16]  # two next() of a batching iterable
    assert samples_per_call(np.array([8]), 8, 8).tolist() == [8]  # __getitems__: unchanged
    assert samples_per_call(np.array([1, 1, 1]), 2, 2).tolist() == [1, 1, 1]  # one skipped: left as it was
    assert samples_per_call(np.array([1, 1, 1]), 10, 3).sum() == 10


@pytest.mark.parametrize("spec, cls, site, ok", [
    ("TrainSet", "__main__.TrainSet", None, True),
    ("data.TrainSet", "pkg.data.TrainSet", None, True),
    ("Set", "__main__.TrainSet", None, False),
    ("train.py:42", "x.Y", "/home/me/proj/train.py:42", True),
    ("proj/train.py:42", "x.Y", "/home/me/proj/train.py:42", True),
    ("train.py:43", "x.Y", "/home/me/proj/train.py:42", False),
    ("TrainSet@train.py:42", "__main__.TrainSet", "/a/train.py:42", True),
    ("ValSet@train.py:42", "__main__.TrainSet", "/a/train.py:42", False),
])
def test_loader_selector(spec, cls, site, ok):
    assert LoaderSelector.parse(spec).matches(cls, (site, None)) is ok


@pytest.mark.parametrize("spec", ["", "A@train.py", "A@:3", "A@train.py:x"])
def test_loader_selector_rejects_malformed(spec):
    with pytest.raises(UserError):
        LoaderSelector.parse(spec)


def test_data_folders_exclude_library_and_bytecode():
    import PIL

    assert not is_data_folder(str(Path(PIL.__file__).parent / "__pycache__"))
    assert not is_data_folder(str(Path(PIL.__file__).parent))
    assert not is_data_folder(str(ROOT / "profiler" / "harness"))
    assert not is_data_folder(str(Path(np.__file__).parent.parent))  # site-packages itself
    assert not is_data_folder("/proc/123/task/456") and not is_data_folder("/sys/block/sda")
    assert is_data_folder("/data/imagenet/train")


class Val(TensorDataset):
    pass


class Train(TensorDataset):
    pass


class Stream(IterableDataset):
    def __iter__(self):
        for _ in range(30):
            yield torch.zeros(16, 4)  # a batching dataset: 16 samples per item


def _loaders() -> tuple[DataLoader, DataLoader]:
    val = DataLoader(Val(torch.zeros(64, 4)), batch_size=8)
    train = DataLoader(Train(torch.zeros(320, 4)), batch_size=8)
    return val, train


def test_a_sanity_check_loader_does_not_end_the_profile():
    s = Session(warmup=2, steps=10, then="continue").start()
    try:
        val, train = _loaders()
        for i, _ in enumerate(val):  # two batches, the iterator dropped (Lightning's sanity check)
            if i == 1:
                break
        for _ in train:
            pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.dataset_class.endswith(".Train")
    assert s.measured_steps == 10 and s.restarts == 1 and s.closed
    assert [o.dataset_class.rsplit(".", 1)[-1] for o in s.others] == ["Val"]
    assert s.others[0].steps == 2 and s.others[0].samples == 16 and s.others[0].role.startswith("stopped early")
    assert s.loader.created_at is not None and s.loader.created_at.endswith(f"{Path(__file__).name}:"
                                                                            f"{_loaders.__code__.co_firstlineno + 2}")


def test_a_shorter_validation_pass_between_epochs_stays_an_other_loader():
    s = Session(warmup=2, steps=60, then="continue").start()
    try:
        val, train = _loaders()
        for _ in range(2):
            for _ in train:  # 40 batches an epoch: the window needs more than one
                pass
            for _ in val:  # 8 batches: shorter than what train delivered; it does not take the window
                pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.dataset_class.endswith(".Train") and s.restarts == 0
    assert len(s.epochs) == 2 and s.measured_steps == 60
    assert len(s.others) == 1 and s.others[0].epochs >= 1 and s.others[0].role.startswith("iterated beside")


def _fresh_loader(batch_size: int = 8) -> DataLoader:
    return DataLoader(Train(torch.zeros(240, 4)), batch_size=batch_size)  # one line for every epoch's loader


def test_a_loader_made_afresh_each_epoch_is_one_loader():
    """``for b in DataLoader(...)`` inside the epoch loop: each epoch's loader is new, made on the same line over the
    same dataset class and settings. The window goes on over the next one as that loader's next epoch (before: the
    run ended as partial when the first epoch's loader stopped, and the second was listed as another loader). One
    made with another batch size is another loader."""
    s = Session(warmup=2, steps=60, then="continue").start()
    try:
        for _ in range(3):
            for _ in _fresh_loader():  # 30 batches an epoch: the window needs three epochs' loaders
                pass
        for _ in _fresh_loader(batch_size=16):
            pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.recreated == 2 and s.restarts == 0
    assert len(s.epochs) == 3 and s.measured_steps == 60 and s.closed
    assert len(s.others) == 0  # the window had closed before the batch-16 loader: not counted


def test_a_loader_of_other_settings_on_the_same_line_is_another_loader():
    s = Session(warmup=2, steps=60, then="continue").start()
    try:
        for _ in _fresh_loader():
            pass
        for _ in _fresh_loader(batch_size=16):
            pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.recreated == 0 and len(s.epochs) == 1 and s.measured_steps < 60
    assert len(s.others) == 1 and s.others[0].batch_size == 16


def test_interleaved_loaders_keep_the_first():
    s = Session(warmup=1, steps=5, then="continue").start()
    try:
        val, train = _loaders()
        for _ in zip(train, val):
            pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.dataset_class.endswith(".Train") and s.restarts == 0


def test_loader_selector_picks_the_named_one():
    s = Session(warmup=1, steps=4, then="continue", select=LoaderSelector.parse("Val")).start()
    try:
        val, train = _loaders()
        for _ in train:
            pass
        for _ in val:
            pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.dataset_class.endswith(".Val")
    assert s.loader.chosen == "named by --loader Val"
    assert s.others[0].role == "not the one --loader named" and s.others[0].steps == 40


def test_batch_size_none_with_a_batching_dataset_counts_the_batch():
    s = Session(warmup=1, steps=5, then="continue").start()
    try:
        for _ in DataLoader(Stream(), batch_size=None, num_workers=1):
            pass
    finally:
        s.stop()
    measured = [r for r in s.rows if r.measured]
    assert [r.n_samples for r in measured] == [16] * 5 and s.loader is not None
    assert s.loader.samples_basis == "batch"


def test_cli_loader_option(tmp_path, capsys):
    script = tmp_path / "two.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "class A(TensorDataset): pass\nclass B(TensorDataset): pass\n"
        "a = DataLoader(A(torch.zeros(400, 2)), batch_size=4)\n"
        "b = DataLoader(B(torch.zeros(40, 2)), batch_size=4)\n"
        "for _ in a: pass\nfor _ in b: pass\n")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "profiler", "run", "--no-plots", "--no-progress", "--warmup", "1", "--steps", "5",
           "--out", str(tmp_path / "r")]
    p = subprocess.run(cmd + ["--loader", f"B@{script.name}:6", str(script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    import json

    rec = json.loads((tmp_path / "r" / "run.json").read_text())
    assert rec["job"]["loader"]["dataset_class"] == "__main__.B"
    assert rec["config"]["loader"] == "B@two.py:6" and "image_size" not in rec["config"]
    assert "Profiled loader: B, 0 workers, batch size 4" in " ".join(p.stdout.split())
    # The two refusals come before any script or run starts: in this process (a Python start and torch import each)
    from profiler.cli import main

    refused = ["run", "--no-plots", "--no-progress", "--out", str(tmp_path / "r2")]
    capsys.readouterr()
    assert main(refused + ["--loader", "B@two.py", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--loader" in err, err
    assert main(refused + ["--loader", "B"]) == 2
    assert "--loader applies to a script" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()  # refused before a run folder is made


def test_api_loader_and_the_report_header(tmp_path):
    import profiler
    from profiler.render.html import report_context

    val, train = _loaders()
    with profiler.profile(out=str(tmp_path / "api"), warmup=1, steps=4, plots=False, quiet=True,
                          loader="Val") as run:
        for _ in train:
            pass
        for _ in val:
            pass
    rec = run.record
    assert rec.job["loader"]["dataset_class"].endswith(".Val") and rec.config["loader"] == "Val"
    assert not any(k in rec.config for k in ("model", "image_size", "augment", "workers", "mode"))
    ctx = report_context(rec, {})
    assert ctx["loader_lines"][0].startswith("Profiled loader: Val, 0 workers, batch size 8; created at ")
    assert ctx["loader_lines"][1].startswith("1 other loader ran, not profiled: Train from ")
    assert {"value": "0 × 8", "label": "workers × batch size"} in ctx["cards"]
    assert not any("None" in str(n["value"]) + n["label"] for n in ctx["cards"])
    with pytest.raises(UserError):
        profiler.profile(loader="Val@x.py")


def test_a_validation_pass_in_the_middle_of_an_epoch_does_not_take_the_window():
    s = Session(warmup=2, steps=30, then="continue").start()
    try:
        val, train = _loaders()
        for i, _ in enumerate(train):
            if i == 5:  # validation every few steps, inside the epoch (Lightning's val_check_interval)
                for _ in val:
                    pass
    finally:
        s.stop()
    assert s.loader is not None and s.loader.dataset_class.endswith(".Train") and s.restarts == 0
    assert s.measured_steps == 30 and s.others[0].steps == 8
