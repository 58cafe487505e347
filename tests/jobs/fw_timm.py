"""A timm job: create_dataset over an image folder, create_loader with timm's prefetcher (on the CPU: device='cpu')
and its training augmentation, one worker, a tiny model: decoding and augmenting JPEGs is the bottleneck.

argv: IMAGE_DIR [steps]
"""
import sys

import torch
from timm.data import create_dataset, create_loader

if __name__ == "__main__":
    torch.set_num_threads(1)
    root, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    ds = create_dataset("", root=root, split="train", is_training=True)
    loader = create_loader(ds, input_size=(3, 96, 96), batch_size=8, is_training=True, use_prefetcher=True,
                           num_workers=1, device=torch.device("cpu"), persistent_workers=False)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 96 * 96, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    while done < steps:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y % 4)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done >= steps:
                break
