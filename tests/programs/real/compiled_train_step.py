#!/usr/bin/env python3
"""The PyTorch 2 recipe "compile the whole training step": forward, loss, ``backward()``,
``optimizer.step()`` and ``zero_grad(set_to_none=True)`` inside one function decorated
``@torch.compile(...)`` with arguments (the decorator-factory form; dynamo breaks its graph
at the backward and compiles the rest apart), called once per batch from a plain loop over
random batches, ``loss.item()`` every ``--log-every`` steps. The loop times each call
itself; the first ``--warmup`` steps (the compilations) are left out of its mean.

    python compiled_train_step.py                              # CUDA, the default inductor backend
    python compiled_train_step.py --device cpu --backend eager # a CPU smoke test
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description="a torch.compile'd training step in a plain loop")
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = nn.Sequential(nn.Linear(args.dim, args.width), nn.GELU(), nn.Linear(args.width, args.dim)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    @torch.compile(backend=args.backend)
    def train_step(x, y):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    ms_each = []
    for step in range(args.steps):
        x = torch.randn(args.batch, args.dim, device=device)
        y = torch.randn(args.batch, args.dim, device=device)
        sync()
        t = time.perf_counter()
        loss = train_step(x, y)
        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")
        sync()
        ms_each.append((time.perf_counter() - t) * 1e3)
    timed = ms_each[args.warmup:]
    ms = sum(timed) / len(timed)
    print("RESULT " + json.dumps({"program": "compiled_train_step", "step": "one call of the compiled training step",
                                  "ms_per_step": round(ms, 4), "ms_per_iter": round(ms, 4), "steps": len(ms_each),
                                  "warmup": args.warmup, "ms_each": [round(m, 4) for m in ms_each], "device": str(device)}))


if __name__ == "__main__":
    main()
