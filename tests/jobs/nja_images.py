"""A user's job over PNG files: even samples through OpenCV + albumentations, odd ones through MONAI (LoadImage and
a monai Compose of random transforms), every library imported at the top, as such scripts do.

Usage: nja_images.py DIR WORKERS [EPOCHS]. Each sample uses one library for its decode and its augment, so a library
whose calls went unnamed leaves its samples without a decode or augment stage.
"""
import sys
from pathlib import Path

import albumentations as A
import cv2
import numpy as np
import torch
from monai.transforms import Compose, EnsureChannelFirst, LoadImage, RandFlip, RandGaussianNoise, Resize
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, folder):
        self.paths = sorted(str(p) for p in Path(folder).glob("*.png"))
        self.aug = A.Compose([A.HorizontalFlip(p=0.5), A.RandomBrightnessContrast(p=1.0), A.Resize(48, 48)])
        self.load = LoadImage(image_only=True)
        self.mtf = Compose([EnsureChannelFirst(channel_dim=-1), Resize((48, 48)), RandFlip(prob=0.5),
                            RandGaussianNoise(prob=1.0)])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        if i % 2:  # MONAI: LoadImage reads + decodes, the Compose augments
            return torch.as_tensor(np.asarray(self.mtf(self.load(self.paths[i])))).float()
        if i % 4:
            img = cv2.imread(self.paths[i], cv2.IMREAD_COLOR)
        else:
            img = cv2.imdecode(np.fromfile(self.paths[i], dtype=np.uint8), cv2.IMREAD_COLOR)
        img = self.aug(image=img)["image"]
        return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float()


if __name__ == "__main__":
    dl = DataLoader(Images(sys.argv[1]), batch_size=4, num_workers=int(sys.argv[2]))
    for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
        for x in dl:
            pass
