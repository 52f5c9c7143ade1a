#!/usr/bin/env python3
"""pytorch/examples' ``mnist_hogwild``: ``model.share_memory()``, then ``--num-processes``
``torch.multiprocessing`` processes (spawn), each running ``train`` on the shared model with a
DataLoader and SGD of its own; then ``test`` in the main process (torchvision is not here:
MNIST-shaped random data). The training is in the children; the main process only tests.
Each child times its batches and sends them back; RESULT's ``train_ms``: per child, each
batch; ``test_batches`` and ``test_ms``: the main process's test loop; ``main_ms``: ``main()``.

    python hogwild.py --num-processes 2 --train-size 3200
"""
import argparse
import json
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def mnist_like(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def train(rank, args, model, dataset, timings):
    torch.manual_seed(args.seed + rank)
    train_loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model.train()
    ms = []
    for data, target in train_loader:
        t = time.perf_counter()
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        ms.append((time.perf_counter() - t) * 1e3)
    timings.put(ms)


def test(model, dataset, batch_size):
    model.eval()
    correct = batches = 0
    with torch.no_grad():
        for data, target in DataLoader(dataset, batch_size=batch_size):
            correct += model(data).argmax(dim=1).eq(target).sum().item()
            batches += 1
    print(f"Test set: Accuracy: {correct}/{len(dataset)}")
    return batches


def main():
    began = time.perf_counter()
    p = argparse.ArgumentParser(description="PyTorch MNIST Hogwild Example")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-processes", type=int, default=2)
    p.add_argument("--train-size", type=int, default=3200)
    p.add_argument("--test-size", type=int, default=1000)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    mp.set_start_method("spawn", force=True)
    model = Net()
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    dataset = mnist_like(args.train_size, 0)
    timings = mp.SimpleQueue()
    processes = []
    for rank in range(args.num_processes):
        proc = mp.Process(target=train, args=(rank, args, model, dataset, timings))
        proc.start()  # We first train the model across `num_processes` processes
        processes.append(proc)
    train_ms = [timings.get() for _ in processes]
    for proc in processes:
        proc.join()
    t = time.perf_counter()
    batches = test(model, mnist_like(args.test_size, 1), args.test_batch_size)  # Once training is complete, we can test the model
    ended = time.perf_counter()
    print("RESULT " + json.dumps({"program": "hogwild", "train_ms": train_ms, "steps": sum(len(ms) for ms in train_ms),
                                  "test_batches": batches, "test_ms": (ended - t) * 1e3, "main_ms": (ended - began) * 1e3}))


if __name__ == "__main__":
    main()
