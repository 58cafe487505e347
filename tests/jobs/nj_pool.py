"""A job that uses its own multiprocessing.Pool before training (precomputing something), then trains from a
DataLoader with 2 workers. Pool.__exit__ calls terminate(): SIGTERM to the pool's children.

argv: [steps] [start method: fork | spawn | forkserver]
"""
import multiprocessing as mp
import sys

import torch
from torch.utils.data import DataLoader, Dataset


def square(i):
    return i * i


class Squares(Dataset):
    def __init__(self, table):
        self.table = table

    def __len__(self):
        return len(self.table) * 64

    def __getitem__(self, i):
        x = torch.full((64,), float(self.table[i % len(self.table)]))
        for _ in range(10):
            x = torch.tanh(x + 1)
        return x


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    method = sys.argv[2] if len(sys.argv) > 2 else "fork"
    torch.set_num_threads(1)
    ctx = mp.get_context(method)
    with ctx.Pool(2) as p:
        table = p.map(square, range(32))
    with ctx.Pool(2) as p:  # twice: a second pool made while the first one's children are gone
        table = p.map(square, table[:16]) + table[16:]
    loader = DataLoader(Squares(table), batch_size=8, num_workers=2, multiprocessing_context=method)
    model = torch.nn.Linear(64, 4)
    done = 0
    while done < steps:
        for x in loader:
            model(x).sum().backward()
            done += 1
            if done >= steps:
                break
    print("trained", done, flush=True)
