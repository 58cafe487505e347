"""A user's job that calls sys.exit(3) after two batches."""
import sys

from torch.utils.data import DataLoader

if __name__ == "__main__":
    for n, b in enumerate(DataLoader(list(range(100)), batch_size=4, num_workers=1)):
        if n == 1:
            sys.exit(3)
