"""Augmentation presets (`--augment`), from cheap to expensive.

- none:     Resize to image_size x image_size, to tensor. The floor: decode + one resize.
- light:    Resize(short side) + CenterCrop(image_size), to tensor, Normalize: torchvision's *evaluation* recipe.
- standard: RandomResizedCrop(image_size), RandomHorizontalFlip, to tensor, Normalize: torchvision's ImageNet
            *training* recipe (references/classification/presets.py).
- heavy:    standard + ColorJitter(0.4, 0.4, 0.4, 0.1), RandomRotation(15), GaussianBlur(5): a strong
            self-supervised-style pipeline whose CPU cost is several times the standard one.
"""
from __future__ import annotations

from torchvision import transforms as T

from ..errors import UserError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def build_transform(augment: str, image_size: int):
    norm = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if augment == "none":
        return T.Compose([T.Resize((image_size, image_size)), T.ToTensor()])
    if augment == "light":
        # 256/224 = the eval resize ratio of torchvision's recipe.
        return T.Compose([T.Resize(int(round(image_size * 256 / 224))), T.CenterCrop(image_size), T.ToTensor(), norm])
    if augment == "standard":
        return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    if augment == "heavy":
        return T.Compose([
            T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(),
            T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomRotation(15), T.GaussianBlur(5),
            T.ToTensor(), norm,
        ])
    raise UserError(f"unknown --augment '{augment}': use none, light, standard or heavy")
