"""A user's job: MONAI LoadImaged + random transforms in a monai Compose, over a monai.data.Dataset.

Usage: nja_monai.py DIR WORKERS.
"""
import sys
from pathlib import Path

from monai.data import Dataset
from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, RandFlipd, RandGaussianNoised, ScaleIntensityd
from torch.utils.data import DataLoader

if __name__ == "__main__":
    files = [{"img": str(p)} for p in sorted(Path(sys.argv[1]).glob("*.png"))]
    tf = Compose([LoadImaged(keys="img", image_only=True), EnsureChannelFirstd(keys="img"), ScaleIntensityd(keys="img"),
                  RandFlipd(keys="img", prob=0.5), RandGaussianNoised(keys="img", prob=1.0)])
    dl = DataLoader(Dataset(files, transform=tf), batch_size=4, num_workers=int(sys.argv[2]))
    for _ in range(3):
        for b in dl:
            pass
