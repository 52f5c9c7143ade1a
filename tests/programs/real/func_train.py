#!/usr/bin/env python3
"""Training with ``torch.func`` as its tutorials and examples write it, no DataLoader:

* ``--style dpsgd``: the per-sample-gradients tutorial turned into DP-SGD by hand. The
  parameters are a dict of detached tensors (``{k: v.detach() for k, v in
  model.named_parameters()}``); per iteration a random batch, ``vmap(grad(compute_loss),
  in_dims=(None, None, 0, 0))`` over its samples (``compute_loss`` calls
  ``functional_call(model, (params, buffers), (sample.unsqueeze(0),))``), each sample's
  gradient clipped to ``--clip``, summed, Gaussian noise added, and the update
  ``params = {k: p - lr * g}``: no optimizer, no ``backward()`` call;
* ``--style pure``: as a JAX user writes it: no ``nn.Module`` at all, the model a plain
  function of a parameter dict (``torch.func.grad_and_value(loss_fn)(params, x, y)``, a
  two-layer MLP on flattened images), the update over the dict by
  ``torch.utils._pytree.tree_map`` (``optax.sgd`` by hand), the loss's ``.item()`` every
  ``--log-every``; ``--input-penalty W``: double backprop, the loss plus W times the squared
  norm of the logits' gradient with respect to the input, by an inner ``grad`` inside the
  loss (``grad`` of a ``grad``);
* ``--style maml``: functorch's ``maml-omniglot-transforms.py``: per outer iteration
  ``meta_opt.zero_grad()``, ``vmap`` over ``--tasks`` tasks of an inner loop of
  ``--inner-steps`` ``grad(compute_loss)`` steps on the support set, the query loss of the
  adapted parameters, ``qry_losses.sum().backward()`` and ``meta_opt.step()`` (Adam on the
  model's parameters); random support and query sets.

The model is a small CNN (the tutorial's: two convolutions, two linear layers) on
``--size``-pixel one-channel images. Each iteration is timed (``torch.cuda.synchronize()``
on CUDA) with ``time.perf_counter()``: RESULT's ``ms_each``, ``ms_per_step`` (the mean after
``--warmup``), ``iterations``.

    python func_train.py                                  # CUDA, the tutorial's sizes
    python func_train.py --device cpu --iters 30 --batch 16 --size 16
"""
import argparse
import functools
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, grad_and_value, vmap
from torch.utils._pytree import tree_map

p = argparse.ArgumentParser(description="training with torch.func (DP-SGD by hand, or MAML)")
p.add_argument("--style", choices=["dpsgd", "pure", "maml"], default="dpsgd")
p.add_argument("--device", default="cuda")
p.add_argument("--iters", type=int, default=200)
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--batch", type=int, default=64, help="dpsgd: samples per batch")
p.add_argument("--size", type=int, default=28, help="image side, pixels")
p.add_argument("--classes", type=int, default=10)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--clip", type=float, default=1.0, help="dpsgd: per-sample gradient norm bound")
p.add_argument("--noise", type=float, default=1.1, help="dpsgd: noise multiplier")
p.add_argument("--tasks", type=int, default=8, help="maml: tasks per meta-batch")
p.add_argument("--shots", type=int, default=5, help="maml: support (and query) samples per class")
p.add_argument("--inner-steps", type=int, default=5)
p.add_argument("--log-every", type=int, default=10, help="pure: a loss line every N iterations")
p.add_argument("--input-penalty", type=float, default=0.0, help="pure: weight of the input-gradient penalty (0: none)")
args = p.parse_args()
dev = torch.device(args.device)
torch.manual_seed(0)


class SimpleCNN(nn.Module):
    def __init__(self, size: int, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        side = (size - 4) // 2
        self.fc1 = nn.Linear(64 * side * side, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


model = SimpleCNN(args.size, args.classes).to(dev)
buffers = {k: v.detach() for k, v in model.named_buffers()}
cuda = dev.type == "cuda"


def compute_loss(params, buffers, sample, target):
    batch, targets = sample.unsqueeze(0), target.unsqueeze(0)
    predictions = functional_call(model, (params, buffers), (batch,))
    return F.cross_entropy(predictions, targets)


def dpsgd():
    params = {k: v.detach() for k, v in model.named_parameters()}
    ft_compute_sample_grad = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))
    for _ in range(args.iters):
        t0 = time.perf_counter()
        data = torch.randn(args.batch, 1, args.size, args.size, device=dev)
        targets = torch.randint(0, args.classes, (args.batch,), device=dev)
        per_sample_grads = ft_compute_sample_grad(params, buffers, data, targets)
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample_grads.values()], dim=1).norm(dim=1)
        scale = (args.clip / (norms + 1e-6)).clamp(max=1.0)
        new = {}
        for k, g in per_sample_grads.items():
            summed = torch.einsum("i,i...->...", scale, g)
            noisy = summed + torch.randn_like(summed) * args.noise * args.clip
            new[k] = params[k] - args.lr * noisy / args.batch
        params = new
        if cuda:
            torch.cuda.synchronize()
        yield (time.perf_counter() - t0) * 1e3


def init_mlp(sizes):
    g = torch.Generator().manual_seed(0)
    return {f"{k}.{w}": (torch.randn(n_in, n_out, generator=g) / n_in**0.5 if w == "w" else torch.zeros(n_out)).to(dev)
            for k, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])) for w in ("w", "b")}


def mlp(params, x):
    layers = len(params) // 2
    for k in range(layers):
        x = x @ params[f"{k}.w"] + params[f"{k}.b"]
        if k < layers - 1:
            x = torch.tanh(x)
    return x


def loss_fn(params, x, y):
    loss = F.cross_entropy(mlp(params, x), y)
    if args.input_penalty:
        dx = grad(lambda x: mlp(params, x).sum())(x)
        loss = loss + args.input_penalty * dx.pow(2).sum(dim=1).mean()
    return loss


def pure():
    params = init_mlp([args.size * args.size, 256, 256, args.classes])
    grad_and_loss = grad_and_value(loss_fn)
    for i in range(args.iters):
        t0 = time.perf_counter()
        x = torch.randn(args.batch, args.size * args.size, device=dev)
        y = torch.randint(0, args.classes, (args.batch,), device=dev)
        grads, loss = grad_and_loss(params, x, y)
        params = tree_map(lambda p, g: p - args.lr * g, params, grads)
        if i % args.log_every == 0:
            print(f"step {i} loss {loss.item():.4f}")
        if cuda:
            torch.cuda.synchronize()
        yield (time.perf_counter() - t0) * 1e3


def loss_for_task(params, n_inner_iter, x_spt, y_spt, x_qry, y_qry):
    def task_loss(new_params, x, y):
        return F.cross_entropy(functional_call(model, (new_params, buffers), (x,)), y)

    new_params = params
    for _ in range(n_inner_iter):
        grads = grad(task_loss)(new_params, x_spt, y_spt)
        new_params = {k: new_params[k] - g * 1e-1 for k, g in grads.items()}
    qry_logits = functional_call(model, (new_params, buffers), (x_qry,))
    return F.cross_entropy(qry_logits, y_qry), (qry_logits.argmax(dim=1) == y_qry).float().mean()


def maml():
    params = dict(model.named_parameters())
    meta_opt = torch.optim.Adam(params.values(), lr=1e-3)
    setsz = args.classes * args.shots
    for i in range(args.iters):
        t0 = time.perf_counter()
        x_spt = torch.randn(args.tasks, setsz, 1, args.size, args.size, device=dev)
        y_spt = torch.arange(args.classes, device=dev).repeat(args.shots).expand(args.tasks, -1)
        x_qry, y_qry = torch.randn_like(x_spt), y_spt
        meta_opt.zero_grad()
        compute_loss_for_task = functools.partial(loss_for_task, params, args.inner_steps)
        qry_losses, qry_accs = vmap(compute_loss_for_task)(x_spt, y_spt, x_qry, y_qry)
        qry_losses.sum().backward()
        meta_opt.step()
        if i % 10 == 0:
            print(f"[it {i}] loss {qry_losses.mean().item():.3f} acc {qry_accs.mean().item():.3f}")
        if cuda:
            torch.cuda.synchronize()
        yield (time.perf_counter() - t0) * 1e3


times = list({"dpsgd": dpsgd, "pure": pure, "maml": maml}[args.style]())
timed = times[args.warmup:]
print("RESULT " + json.dumps({"style": args.style, "iterations": args.iters, "ms_each": times,
                              "ms_per_step": sum(timed) / len(timed)}))
