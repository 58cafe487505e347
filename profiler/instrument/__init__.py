"""Instrumentation of an ordinary DataLoader: what runs inside the user's job to time it, without changing what the
job observes.

- ``session``: the main side — one step per ``next()``, epochs, the measured window; its halves ``tracking`` (which
  loader is profiled) and ``flat_steps`` (steady-state steps kept flat until the window closes), its records
  ``steps``;
- the fetch, per dataset call and per batch, carried to the main process with the batch: ``batch`` (the record:
  BatchMeta, the envelope, LeanOut), ``proxies`` (the per-call path), ``fetch`` (a fetch's two ends),
  ``inline_fetch`` (the written-out ``num_workers=0`` fetch), ``derived`` (derived clocks), ``lean_check``;
  ``worker``: the worker process itself (and the old names, re-exported);
- ``substages``: named sub-stages of a sample (PIL decode, transforms, ``profiler.stage(...)``);
- ``clocks``: the per-thread clocks and /proc readers the spans use;
- ``collect``: the session's rows as the record's timeline tables;
- ``torch_hooks``: the private torch details all of the above relies on, checked by its ``check()``;
  ``torch_private``: torch's private functions and the saved originals (a leaf: imports nothing of ours).

docs/architecture.md draws the flow; the NOTE [ ... ] blocks in these modules are the hot path's contract.

Nothing is imported here: importing the package must not import torch.
"""
