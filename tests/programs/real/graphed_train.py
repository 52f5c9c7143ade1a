"""Training with ``torch.cuda.make_graphed_callables``, as PyTorch's CUDA-graphs docs write it
(and MLPerf's training submissions use it): the modules are captured once, forward and
backward each as a CUDA graph, while the loss, ``optimizer.step()`` and ``zero_grad`` stay
eager. Two shapes (``--capture``):

- ``whole``: the docs' whole-network capture, a conv net with BatchNorm
  (``model = make_graphed_callables(model, (sample,))``); per iteration one forward graph and
  one backward graph.
- ``partial``: the docs' partial-network capture: ``module1`` always, then ``module2`` or
  ``module3`` chosen on the host by ``tmp.sum().item() > 0`` (a sync in the middle of the
  step); per iteration two forward and two backward graphs, which of them varies.

Each iteration timed from its start to ``torch.cuda.synchronize()`` at its end; the first
``--warmup`` left out. CUDA only (graphs need a GPU).

    python graphed_train.py --capture whole
    python graphed_train.py --capture partial --dim 4096 --hidden 8192
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def conv_net(width, classes):
    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    return nn.Sequential(block(3, width, 1), block(width, width, 1), block(width, 2 * width, 2), block(2 * width, 2 * width, 1),
                         block(2 * width, 4 * width, 2), block(4 * width, 4 * width, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, classes))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capture", choices=["whole", "partial"], default="whole")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--width", type=int, default=64, help="whole: the conv net's first width")
    p.add_argument("--size", type=int, default=64, help="whole: image side")
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--dim", type=int, default=2048, help="partial: input features")
    p.add_argument("--hidden", type=int, default=4096, help="partial: module1's output features")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True

    if args.capture == "whole":
        model = conv_net(args.width, args.classes).to(device)
        sample = torch.randn(args.batch, 3, args.size, args.size, device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        model = torch.cuda.make_graphed_callables(model, (sample,))

        def step(data, target):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(data), target)
            loss.backward()
            optimizer.step()
            return loss

        def batch():
            return (torch.randn(args.batch, 3, args.size, args.size, device=device),
                    torch.randint(0, args.classes, (args.batch,), device=device))
    else:
        module1 = nn.Linear(args.dim, args.hidden).to(device)
        module2 = nn.Linear(args.hidden, args.classes).to(device)
        module3 = nn.Linear(args.hidden, args.classes).to(device)
        loss_fn = nn.MSELoss()
        optimizer = torch.optim.SGD([*module1.parameters(), *module2.parameters(), *module3.parameters()], lr=0.01)
        x = torch.randn(args.batch, args.dim, device=device)
        h = torch.randn(args.batch, args.hidden, device=device, requires_grad=True)
        module1 = torch.cuda.make_graphed_callables(module1, (x,))
        module2 = torch.cuda.make_graphed_callables(module2, (h,))
        module3 = torch.cuda.make_graphed_callables(module3, (h,))
        branches = []

        def step(data, target):
            optimizer.zero_grad(set_to_none=True)
            tmp = module1(data)  # forward ops run as a graph
            if tmp.sum().item() > 0:
                branches.append(2)
                tmp = module2(tmp)
            else:
                branches.append(3)
                tmp = module3(tmp)
            loss = loss_fn(tmp, target)
            loss.backward()  # module2's or module3's backward graph, then module1's
            optimizer.step()
            return loss

        def batch():
            return torch.randn(args.batch, args.dim, device=device), torch.randn(args.batch, args.classes, device=device)

    ms_each = []
    for i in range(args.warmup + args.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        data, target = batch()
        loss = step(data, target)
        torch.cuda.synchronize()
        if i >= args.warmup:
            ms_each.append((time.perf_counter() - t0) * 1e3)
    ms = sum(ms_each) / len(ms_each)
    print(f"{args.iters} iterations ({args.capture} capture): {ms:.3f} ms/iteration, {args.batch / ms * 1e3:.0f} samples/s, "
          f"last loss {loss.item():.4f}")
    result = {"program": "graphed_train", "step": "one training iteration", "capture": args.capture, "ms_per_step": round(ms, 4),
              "warmup": args.warmup, "iters": args.iters, "ms_each": [round(t, 4) for t in ms_each]}
    if args.capture == "partial":
        result["module2_iterations"] = branches[args.warmup:].count(2)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
