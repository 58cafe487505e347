"""A user's job: num_workers=0, a dataset with __getitems__, CPU work in the dataset, a val loader too."""
import torch
from torch.utils.data import DataLoader, Dataset

import profiler


class Work(Dataset):
    def __len__(self):
        return 200

    def __getitems__(self, idx):
        with profiler.stage("tokenize"):
            # ~1 ms of matmuls per sample, far above the call's own remainder even under load; scaled to stay finite
            x = torch.randn(len(idx), 128, 128) / 128 ** 0.5
            for _ in range(6):
                x = x @ x
        return list(zip(x, idx))


if __name__ == "__main__":
    train = DataLoader(Work(), batch_size=8, num_workers=0)
    val = DataLoader(Work(), batch_size=8, num_workers=0)
    for epoch in range(2):
        for x, y in train:
            pass
        for x, y in val:
            pass
