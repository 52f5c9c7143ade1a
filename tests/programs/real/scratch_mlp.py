#!/usr/bin/env python3
"""Karpathy's makemore part 2 (Bengio et al. 2003's character MLP), as the notebook writes it:
top-level code, no ``nn.Module``, no optimizer, no DataLoader. The parameters are plain
tensors with ``requires_grad = True``; per iteration a random minibatch by ``torch.randint``,
the forward by hand (embedding lookup, tanh layer, ``F.cross_entropy``), ``p.grad = None``,
``loss.backward()``, the update ``p.data += -lr * p.grad``, and ``lossi.append(
loss.log10().item())``. The names are made up here (no download): random syllables.
Each iteration is timed (``torch.cuda.synchronize()`` on CUDA); RESULT's ``ms_each`` and
``ms_per_step`` (the mean after ``--warmup``).

    python scratch_mlp.py                       # CUDA
    python scratch_mlp.py --device cpu --steps 300 --hidden 64
"""
import argparse
import json
import random
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser(description="makemore MLP, from scratch")
p.add_argument("--device", default="cuda")
p.add_argument("--names", type=int, default=32000)
p.add_argument("--block", type=int, default=3, help="context length: characters to predict the next one")
p.add_argument("--emb", type=int, default=10)
p.add_argument("--hidden", type=int, default=200)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--steps", type=int, default=2000)
p.add_argument("--warmup", type=int, default=20)
args = p.parse_args()
dev = args.device

random.seed(42)
syllables = ["ka", "ri", "mo", "lu", "an", "el", "sa", "jo", "na", "th", "be", "ya", "vi", "de", "or"]
words = ["".join(random.choice(syllables) for _ in range(random.randint(1, 4))) for _ in range(args.names)]
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
vocab = len(stoi)


def build_dataset(words):
    X, Y = [], []
    for w in words:
        context = [0] * args.block
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]
    return torch.tensor(X), torch.tensor(Y)


n1 = int(0.8 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xtr, Ytr = Xtr.to(dev), Ytr.to(dev)
print(Xtr.shape, Ytr.shape)

g = torch.Generator().manual_seed(2147483647)
C = torch.randn((vocab, args.emb), generator=g).to(dev)
W1 = torch.randn((args.block * args.emb, args.hidden), generator=g).to(dev)
b1 = torch.randn(args.hidden, generator=g).to(dev)
W2 = torch.randn((args.hidden, vocab), generator=g).to(dev)
b2 = torch.randn(vocab, generator=g).to(dev)
parameters = [C, W1, b1, W2, b2]
print(sum(p.nelement() for p in parameters))  # number of parameters in total
for p in parameters:
    p.requires_grad = True

lossi = []
stepi = []
times = []
cuda = dev.startswith("cuda")
for i in range(args.steps):
    t0 = time.perf_counter()
    # minibatch construct
    ix = torch.randint(0, Xtr.shape[0], (args.batch,), device=dev)

    # forward pass
    emb = C[Xtr[ix]]  # (32, 3, 10)
    h = torch.tanh(emb.view(-1, args.block * args.emb) @ W1 + b1)  # (32, 200)
    logits = h @ W2 + b2  # (32, 27)
    loss = F.cross_entropy(logits, Ytr[ix])

    # backward pass
    for p in parameters:
        p.grad = None
    loss.backward()

    # update
    lr = 0.1 if i < args.steps // 2 else 0.01
    for p in parameters:
        p.data += -lr * p.grad

    # track stats
    stepi.append(i)
    lossi.append(loss.log10().item())
    if cuda:
        torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)
    if i % 500 == 0:
        print(f"{i:7d}/{args.steps:7d}: {loss.item():.4f}")

timed = times[args.warmup:]
print("RESULT " + json.dumps({"ms_per_step": sum(timed) / len(timed), "ms_each": timed, "steps": args.steps,
                              "final_loss": loss.item()}))
