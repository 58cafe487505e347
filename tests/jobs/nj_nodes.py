"""A torchdata.nodes pipeline (SamplerWrapper -> ParallelMapper in processes -> Batcher -> Loader), as its docs
write one; with 'then-loader', a DataLoader trains after it (the profiled loader).

argv: [steps] [then-loader] [method: process | thread]
"""
import sys

import numpy as np
import torch
import torchdata.nodes as tn
from torch.utils.data import DataLoader, Dataset, RandomSampler


def make_sample(i):
    # numpy, not torch: torchdata forks its mapper processes while its reader thread runs torch ops (the sampler),
    # and a torch lock held at that instant hangs a child's first torch call (seen once in ~50 runs under the
    # profiler, none in 36 without); this job is about the children's signals, not that.
    x = np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32)
    for _ in range(10):
        x = np.tanh(x @ x / 64)
    return x[0]


class Samples(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        return torch.from_numpy(make_sample(i))


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    then_loader = len(sys.argv) > 2 and sys.argv[2] == "then-loader"
    method = sys.argv[3] if len(sys.argv) > 3 else "process"
    torch.set_num_threads(1)
    ds = Samples()
    node = tn.SamplerWrapper(RandomSampler(ds, generator=torch.Generator().manual_seed(0)))
    node = tn.ParallelMapper(node, map_fn=make_sample, num_workers=2, method=method)
    node = tn.Batcher(node, batch_size=8)
    loader = tn.Loader(node)
    model = torch.nn.Linear(64, 4)
    done = 0
    for batch in loader:
        model(torch.from_numpy(np.stack(batch))).sum().backward()
        done += 1
        if done >= steps:
            break
    print("nodes batches", done, flush=True)
    # The pipeline stays alive, as a job's does, until the interpreter exits: multiprocessing's exit handler then ends
    # its mapper processes with SIGTERM. (Dropped here instead, torchdata's _ParallelMapperIter is cyclic garbage
    # whose __del__ fails in any forked process that collects it, a DataLoader worker included.)
    if then_loader:
        trained = 0
        for x in DataLoader(Samples(), batch_size=8, num_workers=2):
            model(x).sum().backward()
            trained += 1
            if trained >= steps:
                break
        print("trained", trained, flush=True)
