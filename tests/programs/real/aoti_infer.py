"""Inference with an AOTInductor package, as PyTorch's AOTInductor docs write it: the model
exported once (``torch.export.export`` with a dynamic batch dimension) and compiled into a
``.pt2`` package (``torch._inductor.aoti_compile_and_package``), then loaded with
``torch._inductor.aoti_load_package`` and called in a benchmark loop, each call timed with
``synchronize`` + ``perf_counter``. The loaded model is no ``nn.Module``: its calls run the
compiled C++ (no module forward, no Python frame of the model). The package is compiled
only when ``--package`` does not exist yet (a deployment compiles once, then serves).

    python aoti_infer.py                                     # CUDA
    python aoti_infer.py --device cpu --width 256 --batch 8 --iters 40 --package /tmp/mlp.pt2
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, width, depth, classes):
        super().__init__()
        layers = [nn.Linear(dim, width), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--package", default=os.path.join(os.getcwd(), "model.pt2"))
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    example_inputs = (torch.randn(args.batch, args.dim, device=device),)
    if not os.path.exists(args.package):
        with torch.no_grad():
            model = Model(args.dim, args.width, args.depth, args.classes).to(device).eval()
            batch_dim = torch.export.Dim("batch", min=1, max=1024)
            exported = torch.export.export(model, example_inputs, dynamic_shapes={"x": {0: batch_dim}})
            t0 = time.perf_counter()
            torch._inductor.aoti_compile_and_package(exported, package_path=args.package)
            print(f"compiled {args.package} in {time.perf_counter() - t0:.1f} s")
    compiled_model = torch._inductor.aoti_load_package(args.package)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    ms_each = []
    with torch.inference_mode():
        for i in range(args.warmup + args.iters):
            x = torch.randn(args.batch, args.dim, device=device)
            sync()
            t0 = time.perf_counter()
            out = compiled_model(x)
            sync()
            if i >= args.warmup:
                ms_each.append((time.perf_counter() - t0) * 1e3)
    ms = sum(ms_each) / len(ms_each)
    print(f"{args.iters} batches of {args.batch}: {ms:.3f} ms/batch, {args.batch / ms * 1e3:.1f} samples/s (out {tuple(out.shape)})")
    print("RESULT " + json.dumps({"program": "aoti_infer", "step": "one call of the compiled model", "ms_per_step": round(ms, 4),
                                  "ms_per_batch": round(ms, 4), "warmup": args.warmup, "iters": args.iters,
                                  "ms_each": [round(t, 4) for t in ms_each], "device": str(device)}))


if __name__ == "__main__":
    main()
