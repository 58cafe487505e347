"""A user's job that fails on its fourth batch."""
from torch.utils.data import DataLoader


def check(batch, n):
    if n == 3:
        raise ValueError("bad batch in the user's own code")


if __name__ == "__main__":
    for n, b in enumerate(DataLoader(list(range(100)), batch_size=4)):
        check(b, n)
