"""The timed loop: a real DataLoader + model loop, instrumented with public hooks only.

NOTE: how one sample and one batch flow, and where each timestamp comes from
===========================================================================

    worker process w (or the main process when workers = 0)                      main process
    ------------------------------------------------------                       ------------
    batch sampler yields [(batch_no, idx), ...]   (our BatchSampler: public API)
      for each (batch_no, idx):                   TimedImageDataset.__getitem__
        t_read0  open(path) + read() bytes ...... read     (io)
        t_read1  Image.open + convert("RGB") .... decode   (cpu)
        t_dec1   transform(img) -> tensor ....... augment  (cpu)
        t_aug1
      TimedCollate(samples):
        t_col0   torch.stack + labels ........... collate  (cpu)
        t_col1   -> (images, labels, BatchMeta)  ---- result queue / shared memory ---->  next(it) returns
                                                        (+ pin-memory thread)           t_recv  ... transfer
                                                                                        H2D copy   (CUDA events)
                                                                                        compute    (CUDA events / host)

Every host timestamp is time.perf_counter_ns(), which on Linux is CLOCK_MONOTONIC: one clock for all processes on the
machine, so a worker's t_col1 and the main process's t_recv are directly comparable. CUDA timings come from CUDA
events on the device timeline, mapped to host time through one anchor event recorded right after a synchronize at
the start of the measured window.

The spans ride inside the batch itself (BatchMeta, a plain object the pin-memory thread passes through untouched), so
there is no extra queue, no extra process and no per-sample IPC: the only cost in the workers is a few clock reads and
one small numpy array per batch.
"""
from __future__ import annotations
