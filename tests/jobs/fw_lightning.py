"""A PyTorch Lightning job as a user writes it: Trainer with its default sanity check (2 validation batches before
training) and a validation loader. The training set does planted CPU work per sample in the main process
(num_workers=0), so the job is strongly input-bound (cause cpu) whatever the machine's load.

argv: [max_steps]
"""
import sys

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset


def busy(n):
    x = torch.ones(64, 64)
    for _ in range(n):
        x = torch.tanh(x @ x / 64)
    return x


class TrainSet(Dataset):
    def __len__(self):
        return 640

    def __getitem__(self, i):
        busy(6)
        return torch.randn(32), torch.tensor(i % 4)


class ValSet(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        return torch.randn(32), torch.tensor(i % 4)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(32, 4)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    train = DataLoader(TrainSet(), batch_size=16, shuffle=True, num_workers=0)
    val = DataLoader(ValSet(), batch_size=16, num_workers=0)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(), train, val)
