"""torchdata's StatefulDataLoader as torchtitan-style jobs use it: CPU-heavy samples, workers, a tiny model, and a
mid-epoch checkpoint of the loader's state that a second loader resumes from.

argv: OUT_JSON [workers] [steps] [kind] [loader] [start method]
  kind: map (a Dataset, shuffled by the loader's stateful sampler) | iterable (an IterableDataset whose iterator
        keeps its own state_dict / load_state_dict, sharded over the workers)
  loader: stateful (default) | sub (a user's own subclass of StatefulDataLoader)
  start method: the workers' multiprocessing context (default: torch's default, fork on Linux)
OUT_JSON gets {"after": indices of the batch that followed the state_dict() call, "resumed": indices of the first
batch of a new loader given that state, "steps": batches trained}.
"""
import json
import sys

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

N = 4096
SNAPSHOT_AT = 4  # the state is taken after this many batches (inside the profiler's window of 2 + 6)


def heavy(i):
    x = torch.randn(128, 128, generator=torch.Generator().manual_seed(i))
    for _ in range(25):  # ~10 ms of one core per sample: the workers' CPU work is the bottleneck
        x = torch.tanh(x @ x / 128)
    return x[0, :32]


class HeavySamples(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return heavy(i), i


class HeavyStream(IterableDataset):
    """Each worker yields its share of 0..N-1; the iterator's position is its state."""

    def __iter__(self):
        return _StreamIter()


class _StreamIter:
    def __init__(self):
        info = get_worker_info()
        self.worker, self.workers = (info.id, info.num_workers) if info is not None else (0, 1)
        self.pos = self.worker

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos >= N:
            raise StopIteration
        i, self.pos = self.pos, self.pos + self.workers
        return heavy(i), i

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


class MyLoader(StatefulDataLoader):
    """A user's subclass, as trainers define them."""

    def state_dict(self):
        return {"mine": 1, **super().state_dict()}

    def load_state_dict(self, state):
        state = dict(state)
        state.pop("mine", None)
        super().load_state_dict(state)


def make(kind, workers, cls, context=None):
    ctx = {"multiprocessing_context": context} if context and workers else {}
    if kind == "map":
        return cls(HeavySamples(), batch_size=8, num_workers=workers, shuffle=True,
                   generator=torch.Generator().manual_seed(0), **ctx)
    return cls(HeavyStream(), batch_size=8, num_workers=workers, **ctx)


if __name__ == "__main__":
    out = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    kind = sys.argv[4] if len(sys.argv) > 4 else "map"
    cls = MyLoader if len(sys.argv) > 5 and sys.argv[5] == "sub" else StatefulDataLoader
    context = sys.argv[6] if len(sys.argv) > 6 else None
    torch.set_num_threads(1)
    loader = make(kind, workers, cls, context)
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state, after, done = None, None, 0
    for x, idx in loader:
        if done == SNAPSHOT_AT:
            state = loader.state_dict()
        elif done == SNAPSHOT_AT + 1:
            after = idx.tolist()
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done >= steps:
            break
    resumed = make(kind, workers, cls, context)
    resumed.load_state_dict(state)
    first = next(iter(resumed))[1].tolist()
    with open(out, "w") as f:
        json.dump({"after": after, "resumed": first, "steps": done}, f)
    print("resumed", first == after, flush=True)
