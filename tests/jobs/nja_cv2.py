"""A user's job: OpenCV decode + albumentations augment (imported at the top, as such scripts do).

Usage: nja_cv2.py DIR WORKERS. Half the samples are cv2.imread, half cv2.imdecode of the file's bytes.
"""
import sys
from pathlib import Path

import albumentations as A
import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, folder):
        self.paths = sorted(str(p) for p in Path(folder).glob("*.png"))
        self.aug = A.Compose([A.HorizontalFlip(p=0.5), A.RandomBrightnessContrast(p=1.0), A.Resize(48, 48)])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        if i % 2:
            img = cv2.imread(self.paths[i], cv2.IMREAD_COLOR)
        else:
            img = cv2.imdecode(np.fromfile(self.paths[i], dtype=np.uint8), cv2.IMREAD_COLOR)
        img = self.aug(image=img)["image"]
        return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float()


if __name__ == "__main__":
    dl = DataLoader(Images(sys.argv[1]), batch_size=4, num_workers=int(sys.argv[2]))
    for _ in range(3):
        for x in dl:
            pass
