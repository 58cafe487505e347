"""The "will it fit?" estimator: exact parameter-side bytes, measured activations, max batch, CLI through argparse."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from profiler.commands.fit import add_arguments as add_fit_arguments
from profiler.commands.fit import main as run_fit
from profiler.errors import UserError
from profiler.fit.advice import oom_recommendations
from profiler.fit.check import NO_GPU_NOTE
from profiler.fit.estimate import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_FRACTION,
    LIBRARY_WORKSPACE_BYTES,
    estimate_memory,
    max_batch_size,
)
from profiler.fit.measure import MemoryProbe, is_out_of_memory, measure_line, net_line
from profiler.fit.sizes import GIB, GPU_PRESETS, MIB, parse_size, resolve_gpu_mem

R18_PARAMS = 11_689_512
R50_PARAMS = 25_557_032
# BatchNorm buffers, counted by hand from the architectures: resnet18 has 20 BN layers over 4,800 channels,
# resnet50 53 BN layers over 26,560 channels; each has running_mean + running_var (fp32) per channel and one
# int64 num_batches_tracked.
R18_BUFFER_BYTES = 2 * 4_800 * 4 + 20 * 8
R50_BUFFER_BYTES = 2 * 26_560 * 4 + 53 * 8
SMALL = 64  # px: keeps the CPU activation measurement to a fraction of a second


def test_resnet18_parameter_side_is_exact() -> None:
    bd = estimate_memory("resnet18", 8, mode="train", optimizer="adam", image_size=SMALL)
    assert bd.params == R18_PARAMS
    assert bd.weights_bytes == R18_PARAMS * 4 + R18_BUFFER_BYTES
    assert bd.gradients_bytes == R18_PARAMS * 4
    assert bd.optimizer_bytes == 2 * R18_PARAMS * 4
    tensors = bd.weights_bytes + bd.gradients_bytes + bd.optimizer_bytes + bd.activations_bytes
    assert bd.workspace_bytes == CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES + int(FRAGMENTATION_FRACTION * tensors)
    assert bd.total_bytes == tensors + bd.workspace_bytes
    d = bd.to_dict()
    assert d["params"] == R18_PARAMS and d["mode"] == "train" and d["method"].startswith("cpu-saved-tensors")
    json.dumps(d)  # plain JSON types only


def test_resnet50_params_and_weights() -> None:
    bd = estimate_memory("resnet50", 2, mode="infer", image_size=SMALL)
    assert bd.params == R50_PARAMS
    assert bd.weights_bytes == R50_PARAMS * 4 + R50_BUFFER_BYTES


@pytest.mark.parametrize("optimizer, states", [("sgd", 0), ("momentum", 1), ("adam", 2), ("adamw", 2)])
def test_optimizer_state(optimizer: str, states: int) -> None:
    bd = estimate_memory("resnet18", 8, optimizer=optimizer, image_size=SMALL)
    assert bd.optimizer_bytes == states * R18_PARAMS * 4


def test_infer_has_no_gradients_or_optimizer_state_and_fewer_activations() -> None:
    infer = estimate_memory("resnet18", 8, mode="infer", optimizer="adam", image_size=SMALL)
    train = estimate_memory("resnet18", 8, mode="train", image_size=SMALL)
    assert infer.gradients_bytes == 0 and infer.optimizer_bytes == 0
    assert infer.method.startswith("cpu-live-peak")
    assert 0 < infer.activations_bytes < train.activations_bytes / 3


def test_precision_shrinks_weights() -> None:
    fp32 = estimate_memory("resnet18", 8, mode="infer", image_size=SMALL)
    fp16 = estimate_memory("resnet18", 8, mode="infer", precision="fp16", image_size=SMALL)
    bf16 = estimate_memory("resnet18", 8, mode="infer", precision="bf16", image_size=SMALL)
    int8 = estimate_memory("resnet18", 8, mode="infer", precision="int8", image_size=SMALL)
    assert fp32.weights_bytes / fp16.weights_bytes == pytest.approx(2, rel=1e-3)
    assert fp16.weights_bytes == bf16.weights_bytes
    assert fp32.weights_bytes / int8.weights_bytes == pytest.approx(4, rel=1e-3)
    assert fp32.activations_bytes / fp16.activations_bytes == pytest.approx(2, rel=1e-3)
    assert fp32.activations_bytes / int8.activations_bytes == pytest.approx(4, rel=1e-3)


def test_amp_keeps_fp32_master_state_and_halves_activations() -> None:
    fp32 = estimate_memory("resnet18", 8, image_size=SMALL)
    amp = estimate_memory("resnet18", 8, amp=True, image_size=SMALL)
    assert (amp.weights_bytes, amp.gradients_bytes, amp.optimizer_bytes) == (
        fp32.weights_bytes, fp32.gradients_bytes, fp32.optimizer_bytes)
    assert amp.activations_per_sample_bytes == pytest.approx(fp32.activations_per_sample_bytes / 2, abs=1)
    # the half-precision weight copies autocast keeps for backward
    assert amp.activations_fixed_bytes >= 2 * R18_PARAMS


def test_pure_half_training_keeps_state_in_half() -> None:
    bd = estimate_memory("resnet18", 8, precision="bf16", image_size=SMALL)
    assert bd.gradients_bytes == 2 * R18_PARAMS and bd.optimizer_bytes == 2 * 2 * R18_PARAMS


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_activations_scale_linearly_in_batch(mode: str) -> None:
    a = estimate_memory("resnet18", 16, mode=mode, image_size=SMALL)
    b = estimate_memory("resnet18", 32, mode=mode, image_size=SMALL)
    assert b.activations_bytes / a.activations_bytes == pytest.approx(2, rel=0.03)


def test_activations_are_measured_not_constant() -> None:
    # every feature map has 4x the pixels at twice the side, so a real measurement grows ~4x
    small = estimate_memory("resnet18", 4, image_size=64)
    large = estimate_memory("resnet18", 4, image_size=128)
    assert large.activations_per_sample_bytes / small.activations_per_sample_bytes == pytest.approx(4, rel=0.1)
    # and resnet18 train keeps at least its 64x32x32 stem output and the 3x64x64 input per sample, in fp32
    assert small.activations_per_sample_bytes > (64 * 32 * 32 + 3 * 64 * 64) * 4


def test_max_batch_size_is_monotone_and_consistent() -> None:
    gpus = [1 * GIB, 2 * GIB, 4 * GIB, 8 * GIB, 16 * GIB]
    sizes = [max_batch_size("resnet18", g, image_size=SMALL) for g in gpus]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0] > 0
    best = sizes[2]
    assert estimate_memory("resnet18", best, image_size=SMALL).total_bytes <= 4 * GIB
    assert estimate_memory("resnet18", best + 1, image_size=SMALL).total_bytes > 4 * GIB
    assert max_batch_size("resnet18", 500 * MIB, image_size=SMALL) == 0  # below the workspace allowance


def test_tiny_model_estimate() -> None:
    bd = estimate_memory("tiny", 4, image_size=SMALL)
    assert 0 < bd.params < 100_000 and bd.activations_bytes > 0


@pytest.mark.parametrize("kwargs", [
    {"model_name": "resnet18", "batch_size": 0},
    {"model_name": "resnet18", "batch_size": -3},
    {"model_name": "resnet18", "batch_size": 4, "precision": "int8", "mode": "train"},
    {"model_name": "resnet18", "batch_size": 4, "precision": "int8", "mode": "infer", "amp": True},
    {"model_name": "resnet18", "batch_size": 4, "precision": "fp8"},
    {"model_name": "resnet18", "batch_size": 4, "optimizer": "lion"},
    {"model_name": "nosuchnet", "batch_size": 4},
    {"model_name": "none", "batch_size": 4},
])
def test_bad_options_are_user_errors(kwargs: dict) -> None:
    with pytest.raises(UserError):
        estimate_memory(image_size=SMALL, **kwargs)


def test_recommendations_when_it_does_not_fit() -> None:
    bd = estimate_memory("resnet18", 1024, image_size=SMALL)
    gpu = 3 * GIB
    assert bd.total_bytes > gpu
    recs = oom_recommendations(bd, gpu)
    by_action = {r["action"].split(" (")[0]: r for r in recs}
    best = max_batch_size("resnet18", gpu, image_size=SMALL)
    assert f"use --batch-size {best}" in by_action
    assert by_action[f"use --batch-size {best}"]["fits_after"] is True
    assert "train with mixed precision" in by_action
    assert any(a.startswith("use gradient checkpointing") for a in by_action)
    for r in recs:
        assert set(r) >= {"action", "reason", "expected_gain"} and r["saves_bytes"] > 0
    # the dict form (e.g. read back from --json) gives the same answer
    assert oom_recommendations(bd.to_dict(), gpu) == recs
    # nothing to recommend when it fits
    assert oom_recommendations(bd, bd.total_bytes) == []


def test_recommendations_for_inference_and_smaller_model() -> None:
    bd = estimate_memory("resnet50", 64, mode="infer", image_size=SMALL)
    recs = oom_recommendations(bd, 700 * MIB)  # not even batch 1 fits beside the workspace allowance
    actions = " | ".join(r["action"] for r in recs)
    assert "half precision" in actions
    assert "resnet34" in actions  # the next smaller of its family
    assert "--batch-size" not in actions


@pytest.mark.parametrize("text, expected", [
    ("6GiB", 6 * GIB), ("6GB", 6 * 10**9), ("6g", 6 * GIB), ("6G", 6 * GIB), ("512MiB", 512 * MIB),
    ("512m", 512 * MIB), ("1.5GiB", int(1.5 * GIB)), ("2048", 2048), (" 24 GiB ", 24 * GIB), ("1TB", 10**12),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GiB", "6XB", "-1GiB", "0", "six GB", "6 GiB extra"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(UserError):
        parse_size(bad)


def test_resolve_gpu_mem() -> None:
    for name in ("rtx2060-6g", "rtx3060-12g", "rtx3090-24g", "rtx4090-24g", "t4-16g", "v100-16g", "v100-32g",
                 "a10-24g", "l4-24g", "a100-40g", "a100-80g", "h100-80g", "h200-141g"):
        assert name in GPU_PRESETS
    assert resolve_gpu_mem("A100-40G") == (40 * GIB, "a100-40g (40.00 GiB)")
    assert resolve_gpu_mem("12GiB")[0] == 12 * GIB
    with pytest.raises(UserError, match="preset"):
        resolve_gpu_mem("a100")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fit")
    add_fit_arguments(parser)
    return parser.parse_args(argv)


def test_run_fit_json_is_one_object(tmp_path, capsys) -> None:
    args = _parse(["--model", "resnet18", "--batch-size", "32", "--image-size", str(SMALL), "--gpu-mem", "t4-16g",
                   "--json", "--out", str(tmp_path), "--device", "cpu"])
    assert run_fit(args) == 0
    out = capsys.readouterr().out
    result = json.loads(out)  # fails on anything but exactly one JSON document
    assert isinstance(result, dict)
    bd = result["breakdown"]
    assert bd["params"] == R18_PARAMS and bd["batch_size"] == 32
    assert result["gpu_bytes"] == 16 * GIB and result["fits"] is True
    assert result["headroom_bytes"] == 16 * GIB - bd["total_bytes"]
    assert result["max_batch_size"] == max_batch_size("resnet18", 16 * GIB, image_size=SMALL)
    assert result["recommendations"] == []
    assert list(tmp_path.iterdir()) == []  # --json writes nothing else


def test_run_fit_table_writes_png(tmp_path, capsys) -> None:
    args = _parse(["--model", "resnet18", "--batch-size", "4096", "--image-size", str(SMALL), "--gpu-mem", "8GiB",
                   "--out", str(tmp_path / "r"), "--device", "cpu"])
    assert run_fit(args) == 0
    out = capsys.readouterr().out
    assert "does not fit" in out and "activations" in out and "largest batch" in out
    pngs = list((tmp_path / "r").glob("*.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pngs[0].stat().st_size > 10_000


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_run_fit_without_gpu_says_so(capsys) -> None:
    args = _parse(["--model", "tiny", "--batch-size", "8", "--image-size", str(SMALL), "--json"])
    assert run_fit(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["gpu_bytes"] is None and result["fits"] is None and NO_GPU_NOTE in result["notes"]


@pytest.mark.parametrize("argv", [
    ["--model", "resnet18", "--batch-size", "0"],
    ["--model", "resnet18", "--batch-size", "-4"],
    ["--model", "resnet18", "--batch-size", "4", "--gpu-mem", "lots"],
    ["--model", "resnet18", "--batch-size", "4", "--precision", "int8"],
    ["--model", "resnet_huge", "--batch-size", "4"],
    ["--model", "resnet18", "--batch-size", "4", "--image-size", "0"],
    ["--model", "resnet18", "--batch-size", "4", "--image-size", "100000"],
    ["--model", "resnet18", "--batch-size", "4", "--gpu-mem", "99999999999999999999TiB"],
    ["--model", "resnet18", "--batch-size", "4", "--num-classes", "0"],
    ["--model", "resnet18", "--batch-size", "4", "--device", "tpu"],
])
def test_run_fit_bad_input_is_a_user_error(argv: list[str], tmp_path) -> None:
    with pytest.raises(UserError):
        run_fit(_parse(["--device", "cpu", *argv, "--json", "--out", str(tmp_path)]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_measurement_agrees_with_cpu_measurement() -> None:
    cpu = estimate_memory("resnet18", 64, image_size=128, device="cpu")
    gpu = estimate_memory("resnet18", 64, image_size=128, device="cuda")
    assert gpu.method.startswith("cuda-peak")
    assert 0.6 < gpu.activations_bytes / cpu.activations_bytes < 1.6


@pytest.mark.parametrize("extra", [
    ["--image-size", "100000"],
    ["--gpu-mem", "99999999999999999999TiB"],
    ["--out", "FILE"],
    ["--out", "FILE/sub"],
])
def test_fit_cli_bad_input_is_one_line_and_exit_2(extra: list[str], tmp_path) -> None:
    """Through the real CLI entry point: one line on stderr, exit 2, nothing measured (so it returns at once)."""
    import os
    import subprocess
    import sys

    (tmp_path / "FILE").write_text("a file, not a folder")
    argv = [sys.executable, "-m", "profiler", "fit", "--model", "resnet18", "--batch-size", "4", "--device", "cpu",
            *[a.replace("FILE", str(tmp_path / "FILE")) for a in extra]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profiler: error:"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_net_line_subtracts_each_baseline() -> None:
    # 1 MiB per sample, 3 MiB fixed, measured on top of different baselines (weights, then weights + workspace)
    points = [(8, 100 * MIB + 3 * MIB + 8 * MIB, 100 * MIB), (16, 132 * MIB + 3 * MIB + 16 * MIB, 132 * MIB)]
    assert net_line(points) == (MIB, 3 * MIB)
    # a least-squares fit through three exact points is the same line
    assert net_line([*points, (32, 7 * MIB + 3 * MIB + 32 * MIB, 7 * MIB)]) == (MIB, 3 * MIB)
    # never a negative slope or intercept
    assert net_line([(8, 10, 0), (16, 5, 0)]) == (0, 8)
    with pytest.raises(ValueError):
        net_line([(8, 10, 0), (8, 12, 0)])


class _FakeAllocator:
    """A device allocator's counters, and a step that creates a library workspace on its first call and keeps it
    (as cuBLAS does on a GPU): what measure_line must not count as activations."""

    WORKSPACE = 32 * MIB
    PER_SAMPLE = 8 * MIB
    FIXED = 5 * MIB

    def __init__(self) -> None:
        self.now = 200 * MIB  # weights
        self.high = self.now
        self.workspace = False

    def probe(self) -> MemoryProbe:
        def reset() -> None:
            self.high = self.now
        return MemoryProbe(allocated=lambda: self.now, peak=lambda: self.high, reset_peak=reset, sync=lambda: None)

    def _alloc(self, n: int) -> None:
        self.now += n
        self.high = max(self.high, self.now)

    def step(self, batch: int) -> None:
        if not self.workspace:
            self.workspace = True
            self._alloc(self.WORKSPACE)
        act = self.FIXED + self.PER_SAMPLE * batch
        self._alloc(act)
        self.now -= act


def test_measure_line_with_warmup_is_exact_despite_a_lazy_workspace() -> None:
    dev = _FakeAllocator()
    points = measure_line(dev.step, (8, 16), dev.probe())
    assert net_line(points) == (dev.PER_SAMPLE, dev.FIXED)


def test_measure_line_without_warmup_shows_the_bug_it_prevents() -> None:
    # the first measurement carries the workspace, the second has it in its baseline: slope low by 32 MiB / 8
    dev = _FakeAllocator()
    per_sample, _ = net_line(measure_line(dev.step, (8, 16), dev.probe(), warmup=False))
    assert per_sample == dev.PER_SAMPLE - dev.WORKSPACE // 8


def test_out_of_memory_is_recognised() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                                         "memory: you tried to allocate 1099511627776 bytes"))
    assert not is_out_of_memory(RuntimeError("Given groups=1, weight of size [64, 3, 7, 7], expected input"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_googlenet_train_measures_through_its_named_tuple_output() -> None:
    # googlenet returns GoogLeNetOutputs in train mode: the measurement must take its logits, not fail
    bd = estimate_memory("googlenet", 2, mode="train", image_size=SMALL, device="cpu")
    assert bd.activations_per_sample_bytes > 0
