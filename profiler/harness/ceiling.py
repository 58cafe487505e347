"""The "model alone" ceiling: a few extra steps after the window on a batch already on the device, and
what 0 workers would cost (a few samples loaded in the main process).

Why: what the model could do if input were free is the ceiling every input-pipeline change runs into, and the steps
in the window cannot tell it (on a CPU run the loader's workers take cores from the model; on a GPU the step waits
on the host). DS-Analyzer measures it the same way ("synthetic data"). The steps run after the measured window, so
no figure of the window changes; their cost (seconds of wall time added to the run) is recorded with them.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:  # annotations only
    from ..record.schema import MainProcessSamples, ModelAlone

# Steps timed after one untimed warm-up step: 5 steps give a mean within a few per cent for a steady model step and
# cost at most 6 steps of wall time, small next to a window of tens of steps.
MODEL_ALONE_STEPS = 5


def measure_model_alone(step_fn: Callable[[torch.Tensor, torch.Tensor], None], device: torch.device, batch: int,
                        image_size: int, num_classes: int, steps: int = MODEL_ALONE_STEPS) -> ModelAlone:
    """{steps, seconds_per_step, cost_s} of ``step_fn`` on one random batch already on ``device``."""
    t_start = time.perf_counter()
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 3, image_size, image_size, generator=gen).to(device)
    y = torch.randint(0, max(num_classes, 2), (batch,), generator=gen).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step_fn(x, y)  # warm-up: allocator, cuDNN autotune, lazy init
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step_fn(x, y)
    sync()
    per = (time.perf_counter() - t0) / steps
    return {"steps": steps, "seconds_per_step": round(per, 6), "batch_size": batch,
            "cost_s": round(time.perf_counter() - t_start, 4)}


# Samples loaded in the main process after the window: one small batch is enough to see the main process's own
# per-sample cost (its torch ops run on the main process's intra-op threads, workers' on one) and costs ~1 s.
MAIN_PROCESS_SAMPLES = 16


def measure_main_process_samples(dataset: Any, indices: list[int], n: int = MAIN_PROCESS_SAMPLES) -> MainProcessSamples:
    """{samples, wall_s, cpu_s (main thread), process_cpu_s (all its threads), torch_threads, cost_s}:
    ``dataset[i]`` called in the main process for up to ``n`` of ``indices`` (files the window just read, so from
    the page cache).

    Why: with 0 workers the dataset runs in the main process, whose torch ops use all its intra-op threads (a worker
    uses one); on shared cores those threads wait for each other, so a sample can cost several times its in-worker
    CPU. A what-if for workers=0 from a run with workers needs this figure; nothing in the window measures it.
    """
    t_start = time.perf_counter()
    picked = [i for i in dict.fromkeys(indices) if i >= 0][:n]
    wall = cpu = proc = 0.0
    done = 0
    for i in picked:
        c0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
        item = dataset[i]
        wall += time.perf_counter() - w0
        cpu += time.thread_time() - c0
        proc += time.process_time() - p0  # all the process's threads: the intra-op pool spins with the main thread
        done += item is not None
    return {"samples": done, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6), "process_cpu_s": round(proc, 6),
            "torch_threads": torch.get_num_threads(), "cost_s": round(time.perf_counter() - t_start, 4)}
