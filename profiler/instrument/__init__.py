"""Instrumentation of an ordinary DataLoader: what runs inside the user's job to time it, without changing what the
job observes.

- ``session``: the main side — which loader is profiled, one step per ``next()``, epochs, the measured window;
- ``worker``: the worker side — per dataset call and per batch timing, carried to the main process with the batch;
- ``substages``: named sub-stages of a sample (PIL decode, transforms, ``profiler.stage(...)``);
- ``clocks``: the per-thread clocks and /proc readers the spans use;
- ``collect``: the session's rows as the record's timeline tables;
- ``torch_hooks``: the private torch details all of the above relies on, checked by its ``check()``.

Nothing is imported here: importing the package must not import torch.
"""
