#!/usr/bin/env python3
"""TorchScript serving, the way a deployment's serving script is written: the model was
exported once (``torch.jit.trace`` on an example batch, ``torch.jit.save``; done here when
the archive is missing, as its export script would), and the server process only loads the
archive (``torch.jit.load``: no Python model class), freezes it and runs
``torch.jit.optimize_for_inference`` (``--no-optimize``: neither), then answers request
batches under ``torch.inference_mode()``: each request's batch made, the scripted model
called, the top class of each image sent back as a list. Every request timed
(``perf_counter``), the first ``--warmup`` left out (TorchScript's profiling executor
optimises during its first runs).

    python ts_serve.py --img-size 32 --archive m.pt --export-only   # the export script
    python ts_serve.py --img-size 32 --archive m.pt --batch 8 --requests 40
"""
import argparse
import json
import os
import tempfile
import time

import torch

from image_infer import MODELS


def export(path, args):
    model = MODELS[args.model]().eval()
    example = torch.randn(args.batch, 3, args.img_size, args.img_size)
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, example), path)


def main():
    p = argparse.ArgumentParser(description="serve a TorchScript archive, one request batch at a time")
    p.add_argument("--archive", default=os.path.join(tempfile.gettempdir(), "ts_serve_model.pt"))
    p.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-optimize", action="store_true", help="serve the archive as loaded (no freeze, no optimize_for_inference)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--export-only", action="store_true", help="write the archive and stop (the export script's job)")
    args = p.parse_args()

    torch.manual_seed(0)
    if args.export_only or not os.path.exists(args.archive):
        export(args.archive, args)
        if args.export_only:
            return
    m = torch.jit.load(args.archive, map_location=args.device)
    m.eval()
    if not args.no_optimize:
        m = torch.jit.optimize_for_inference(torch.jit.freeze(m))

    ms_each, answered = [], 0
    with torch.inference_mode():
        for i in range(args.warmup + args.requests):
            t0 = time.perf_counter()
            x = torch.randn(args.batch, 3, args.img_size, args.img_size, device=args.device)
            top = m(x).argmax(dim=1).tolist()  # the response
            answered += len(top)
            if i >= args.warmup:
                ms_each.append((time.perf_counter() - t0) * 1e3)
    ms = sum(ms_each) / len(ms_each)
    print(f"{args.requests} requests of {args.batch}: {ms:.3f} ms each")
    print("RESULT " + json.dumps({"program": "ts_serve", "step": "one request: its batch, the scripted model, the top classes",
                                  "requests": args.warmup + args.requests, "warmup": args.warmup, "ms_each": [round(t, 4) for t in ms_each],
                                  "ms_per_step": round(ms, 4)}))


if __name__ == "__main__":
    main()
