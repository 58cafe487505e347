"""The private torch details the profiler relies on (profiler/instrument/torch_hooks.py) are where it expects them.

If this fails after a torch upgrade, the profiler would mis-measure a user's DataLoader: fix torch_hooks.py first.
"""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from profiler.instrument import torch_hooks
from profiler.instrument.session import Session


def test_torch_internals_are_where_the_profiler_expects_them():
    assert torch_hooks.check() == [], f"torch {torch.__version__} moved a DataLoader internal"


def test_install_and_uninstall_restore_torch():
    from torch.utils.data import dataloader as dl

    s = Session(warmup=0, steps=3, then="continue").start()
    try:
        assert dl._BaseDataLoaderIter.__next__ is not torch_hooks._ORIG_NEXT
        assert torch.utils.data._utils.worker._worker_loop is torch_hooks.profiled_worker_loop
    finally:
        s.stop()
    assert torch.utils.data._utils.worker._worker_loop is torch_hooks._ORIG_WORKER_LOOP
    assert dl._DatasetKind.__dict__["create_fetcher"] is torch_hooks._ORIG_CREATE_FETCHER
    assert DataLoader.__iter__ is torch_hooks._ORIG_ITER
    # After a session, batches are plain whatever produced them.
    assert [b.tolist() for b in DataLoader(list(range(4)), batch_size=2)] == [[0, 1], [2, 3]]


def test_batches_unchanged_under_a_session_with_workers():
    data = [{"a": torch.tensor([i]), "b": str(i)} for i in range(12)]
    plain = list(DataLoader(data, batch_size=4, num_workers=2))
    s = Session(warmup=1, steps=100, then="continue").start()
    try:
        loader = DataLoader(data, batch_size=4, num_workers=2)
        profiled = list(loader)
    finally:
        s.stop()
    assert [type(b) for b in profiled] == [dict] * 3
    assert [b["b"] for b in profiled] == [b["b"] for b in plain]
    assert all(torch.equal(x["a"], y["a"]) for x, y in zip(profiled, plain))
    assert len(s.metas) == 3 and {m.worker_id for m in s.metas} == {0, 1}
    assert s.loader is not None and s.loader.num_workers == 2


def test_check_covers_the_fetchers_pinning_and_loader_creation(monkeypatch):
    """Every private seam the profiler writes to is one check() watches: a torch whose fetcher stopped reading
    ``self.dataset`` per call (the timed stand-in would be bypassed) is refused, not mis-measured."""
    import torch.utils.data._utils.fetch as fetch

    def fetch_without_attributes(self, possibly_batched_index):
        return possibly_batched_index

    monkeypatch.setattr(fetch._MapDatasetFetcher, "fetch", fetch_without_attributes)
    assert any("_MapDatasetFetcher.fetch no longer reads" in p for p in torch_hooks.check())
    monkeypatch.undo()
    from torch.utils.data._utils import pin_memory

    monkeypatch.delattr(pin_memory, "pin_memory")
    assert any("pin_memory" in p for p in torch_hooks.check())


def test_loader_creation_watch_is_restored():
    seen = []
    torch_hooks.watch_loader_creation(seen.append)
    try:
        loader = DataLoader(list(range(4)), batch_size=2)
    finally:
        torch_hooks.watch_loader_creation(None)
    assert seen == [loader] and DataLoader.__init__ is torch_hooks._ORIG_INIT
    DataLoader(list(range(4)))
    assert len(seen) == 1
