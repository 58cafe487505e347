"""build_model: the names the CLI accepts, what they build, and the error for anything else."""
from __future__ import annotations

import pytest
import torch

from profiler.errors import UserError
from profiler.harness.models import TinyCNN, amp_dtype, build_model, model_names, needs_grad_scaler, primary_output


@pytest.mark.parametrize("size", [32, 224])
def test_tiny_forward_and_backward(size: int) -> None:
    model = build_model("tiny", num_classes=10)
    assert isinstance(model, TinyCNN)
    x = torch.randn(2, 3, size, size)
    out = model(x)
    assert out.shape == (2, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_tiny_batch_one_in_train_mode_at_32px() -> None:
    # the smallest supported size must still give BatchNorm more than one value per channel
    model = build_model("tiny").train()
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 1000)


def test_tiny_is_small() -> None:
    params = sum(p.numel() for p in build_model("tiny").parameters())
    assert params < 100_000  # cheap on a 2-core CPU; resnet18 has 11.7 M


def test_none_is_no_model() -> None:
    assert build_model("none") is None
    assert build_model(" None ") is None


@pytest.mark.parametrize("name, params", [("resnet18", 11_689_512), ("mobilenet_v3_small", 2_542_856)])
def test_torchvision_models_build_without_weights(name: str, params: int) -> None:
    model = build_model(name)
    assert sum(p.numel() for p in model.parameters()) == params
    with torch.no_grad():
        out = build_model(name, num_classes=7).eval()(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 7)


def test_model_names_lists_the_kinds() -> None:
    names = model_names()
    assert names[:2] == ["none", "tiny"]
    assert {"resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16"} <= set(names)
    # classification only: detection/segmentation/video models take other inputs
    assert not any(n.startswith(("fasterrcnn", "deeplab", "r3d_", "raft")) for n in names)


@pytest.mark.parametrize("bad", ["x", "resnet", "fasterrcnn_resnet50_fpn", ""])
def test_unknown_model_is_a_user_error(bad: str) -> None:
    with pytest.raises(UserError, match="unknown model") as info:
        build_model(bad)
    assert "resnet18" in str(info.value) and "\n" not in str(info.value)


def test_bad_num_classes_is_a_user_error() -> None:
    with pytest.raises(UserError):
        build_model("tiny", num_classes=0)


def test_primary_output_of_the_containers_models_return() -> None:
    logits = torch.randn(2, 5)
    aux = torch.randn(2, 5)
    assert primary_output(logits) is logits
    assert primary_output((logits, aux)) is logits
    assert primary_output([None, logits]) is logits
    assert primary_output({"out": logits, "aux": aux}) is logits
    assert primary_output({"logits": logits}) is logits
    assert primary_output({"features": logits, "other": aux}) is logits  # the first tensor
    assert primary_output(((logits,), aux)) is logits

    class ModelOutput(dict):  # Hugging Face style: a mapping with a .logits attribute
        logits = None

    hf = ModelOutput(loss=aux)
    hf.logits = logits
    assert primary_output(hf) is logits
    with pytest.raises(UserError, match="no tensor"):
        primary_output({"a": 1, "b": "x"})
    with pytest.raises(UserError):
        primary_output(None)


@pytest.mark.parametrize("name", ["googlenet", "inception_v3"])
def test_primary_output_of_googlenet_and_inception_in_train_mode(name: str) -> None:
    # both return a named tuple of (logits, aux logits...) in train mode; the loss needs the logits
    model = build_model(name, num_classes=6).train()
    size = 299 if name == "inception_v3" else 96
    out = model(torch.randn(2, 3, size, size))
    assert not isinstance(out, torch.Tensor)
    logits = primary_output(out)
    assert logits is out.logits and logits.shape == (2, 6)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1])).backward()


def test_amp_dtype_on_the_cpu_is_bf16() -> None:
    assert amp_dtype(torch.device("cpu")) == torch.bfloat16


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without a usable CUDA device")
def test_amp_dtype_without_a_cuda_device_is_fp16() -> None:
    # nothing is native without a device; fp16 is the safe autocast dtype (and asks for a GradScaler)
    assert amp_dtype(torch.device("cuda")) == torch.float16


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_amp_dtype_on_a_gpu_follows_its_compute_capability() -> None:
    native = torch.cuda.get_device_capability(0) >= (8, 0)
    assert amp_dtype(torch.device("cuda:0")) == (torch.bfloat16 if native else torch.float16)


def test_needs_grad_scaler_only_for_fp16_training() -> None:
    assert needs_grad_scaler(torch.float16, "train")
    assert not needs_grad_scaler(torch.float16, "infer")
    assert not needs_grad_scaler(torch.bfloat16, "train")
    assert not needs_grad_scaler(torch.float32, "train")
