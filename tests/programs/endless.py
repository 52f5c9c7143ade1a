"""A program that never ends on its own, as a model server's worker or a training of many
epochs: perfdoctor run --duration must stop it and still give each pass its steps.

Usage: python endless.py TIMES_DIR [--train [--ddp]] [--cuda]
  default: an inference loop, like a server's worker: a request (random input), the MLP's
           forward, the answer's .tolist(), then a 1 ms pause until the next request.
  --train: a training loop over a DataLoader with 2 worker processes, AdamW, forever.
--ddp: the training as a rank of a torchrun job (gloo, DistributedDataParallel).
--cuda: the model and its inputs on the GPU (a synchronize ends each step's own timer).
Each step's own time (time.perf_counter around the step's work) is appended to
TIMES_DIR/<pid>.txt as it ends, one number in ms per line, flushed: the program's own timer,
for the one process that perfdoctor's pass ran.
"""

import os
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    def __len__(self):
        return 1 << 30  # an epoch that never ends

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        return torch.randn(128, generator=g), index % 10


def serve(model, log, device):
    with torch.inference_mode():
        while True:
            t0 = time.perf_counter()
            x = torch.randn(32, 128, device=device)
            answer = model(x).argmax(-1).tolist()  # to the host: the step's GPU work is done
            log.write(f"{(time.perf_counter() - t0) * 1e3:.4f}\n")
            log.flush()
            assert len(answer) == 32
            time.sleep(0.001)


def train(model, log, device):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Features(), batch_size=64, num_workers=2)
    t0 = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        log.write(f"{(t1 - t0) * 1e3:.4f}\n")
        log.flush()
        t0 = t1


def main():
    torch.set_num_threads(1)
    device = torch.device("cuda" if "--cuda" in sys.argv else "cpu")
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    if "--ddp" in sys.argv:
        torch.distributed.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
    with open(os.path.join(sys.argv[1], f"{os.getpid()}.txt"), "w") as log:
        (train if "--train" in sys.argv else serve)(model, log, device)


if __name__ == "__main__":
    main()
