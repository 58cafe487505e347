"""A job whose input cause changes mid-run, keyed on the step (sequential sampler): cpu-bound (the dataset spins a
core), then io-bound (it evicts a file from the page cache and reads it back, then blocks: a sleep), then cpu-bound
again. argv: DATA_FILE STEPS_PER_PHASE [WORKERS] [BATCH] [STEPS_OF_THE_LAST_PHASE] (default: STEPS_PER_PHASE).
Under torchrun, MON_PHASES_IO_RANK=k gives the io phase to rank k alone (the others stay cpu-bound), and
MON_PHASES_SYNC=1 makes the ranks meet every step in an all-reduce (gloo), as DDP's do."""
import hashlib
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

PATH = sys.argv[1]
PHASE = int(sys.argv[2])
WORKERS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
BATCH = int(sys.argv[4]) if len(sys.argv) > 4 else 4
LAST = int(sys.argv[5]) if len(sys.argv) > 5 else PHASE
SPIN_S = 0.010  # per sample, on a core
# per sample, off the core. Why 25 ms (was 12): in a full suite run four to a 2-core VM (pytest -n 4), the io phase's
# workers waited for a core after each 12-ms block about as long as they blocked, and two of its three windows read
# as cpu: right for that machine, not the cause this phase plants. Twice as long a block keeps it io beside that load.
BLOCK_S = 0.025
CHUNK = bytes(65536)
IO_RANK = os.environ.get("MON_PHASES_IO_RANK")
IO_HERE = IO_RANK is None or IO_RANK == os.environ.get("RANK")


class Phased(Dataset):
    def __len__(self):
        return (2 * PHASE + LAST) * BATCH

    def __getitem__(self, i):
        step = i // BATCH
        if IO_HERE and PHASE <= step < 2 * PHASE:
            fd = os.open(PATH, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.pread(fd, 65536, (i * 4096) % (1 << 20))
            finally:
                os.close(fd)
            time.sleep(BLOCK_S)
        else:
            # CPU work that lets go of the GIL while it runs, as decode/augment code in C does (hashing 64 KB: on
            # the core, GIL released). A pure-Python spin holds the GIL, and the worker's own queue threads (pickling
            # the batch, handing its storage over) wait for it: that reads as transfer, not the cpu this phase plants;
            # a spin with time.sleep(0) in it goes off the core, which reads as blocked (io)
            end = time.thread_time() + SPIN_S
            while time.thread_time() < end:
                hashlib.sha256(CHUNK).digest()
        return torch.tensor([float(i)])


if __name__ == "__main__":
    raise_at = int(os.environ.get("MON_PHASES_RAISE_AT") or -1)  # a crash at this step (the record must survive it)
    sync = os.environ.get("MON_PHASES_SYNC") == "1"
    if sync:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    loader = DataLoader(Phased(), batch_size=BATCH, num_workers=WORKERS)
    for step, x in enumerate(loader):
        if step == raise_at:
            raise RuntimeError(f"the job's own failure at step {step}")
        time.sleep(0.0005)  # the model's step: short, so input sets the pace
        if sync:
            dist.all_reduce(x.sum())  # the gradients' all-reduce: every rank waits here for the slowest
    if sync:
        dist.destroy_process_group()
