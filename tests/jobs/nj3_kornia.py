"""kornia augmentations applied per sample in the workers (as a Dataset's transform): argv [workers] [steps].

Each sample: a random 3x64x64 image through kornia's RandomHorizontalFlip, ColorJitter and RandomAffine (an
AugmentationSequential of them for even samples, the three called one by one for odd ones), a tiny model.
"""
import sys

import kornia.augmentation as K
import torch
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __init__(self, n=512):
        self.n = n
        self.augs = [K.RandomHorizontalFlip(p=0.5), K.ColorJitter(0.2, 0.2, 0.2, 0.1, p=1.0),
                     K.RandomAffine(degrees=10.0, p=1.0)]
        self.seq = K.AugmentationSequential(*self.augs)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(i))
        if i % 2 == 0:
            x = self.seq(x)
        else:
            for aug in self.augs:
                x = aug(x)
        return x[0], i % 4


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.set_num_threads(1)
    loader = DataLoader(Augmented(), batch_size=4, num_workers=workers)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done >= steps:
            break
    print("steps", done, flush=True)
