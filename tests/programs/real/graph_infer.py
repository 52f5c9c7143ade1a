#!/usr/bin/env python3
"""Inference benchmark with a hand-captured CUDA graph: the "whole network capture" of
PyTorch's CUDA Graphs docs (torch.cuda.graph), on image_infer.py's models (ResNet-50,
resnet18, ViT-small/tiny), random weights, random input.

Warm-up on a side stream, capture one forward into a torch.cuda.CUDAGraph, then per timed
iteration: copy the next batch into the graph's static input, replay, clone the static
output. No module is called in the timed loop.

    python graph_infer.py --batch 1                          # latency: launch-bound, the graph's case
    python graph_infer.py --model vit_small --batch 1
    python graph_infer.py --batch 256 --amp                  # throughput
    python graph_infer.py --device cpu --model resnet18 --batch 2 --img-size 64 --warmup 2 --iters 4

CUDA graphs need CUDA. ``--device cpu`` is a smoke mode: the same loop (copy, forward,
clone) with an eager forward where the replay would be, so the program's arguments and
output can be tested on a machine without a GPU; its RESULT says ``"graph": false``.
"""
import argparse
import json
import time
from functools import partial

import torch

from image_infer import add_model_args, create_model  # noqa: E402  (beside this script)


def main():
    parser = argparse.ArgumentParser(description="PyTorch inference benchmark, CUDA graph replay")
    add_model_args(parser, batch=1)
    parser.add_argument("--warmup", type=int, default=10, help="eager forwards on a side stream before the capture")
    parser.add_argument("--iters", type=int, default=100, help="timed replays")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu: the same loop without the graph (smoke test)")
    args = parser.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("graph_infer.py: CUDA graphs need a CUDA GPU, and torch sees none (--device cpu runs the loop without the graph)")
    model, n_params = create_model(args, device)
    amp_dtype = getattr(torch, args.amp_dtype) if args.amp_dtype else (torch.float16 if cuda else torch.bfloat16)
    # the autocast cache must be off for a forward captured in a graph (CUDA Graphs docs)
    autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype, enabled=args.amp, cache_enabled=False)

    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    shape = (args.batch, 3, args.img_size, args.img_size)
    static_input = torch.randn(shape, device=device).contiguous(memory_format=memory_format)
    batches = [torch.randn(shape, device=device).contiguous(memory_format=memory_format) for _ in range(4)]

    print(f"Model {args.model} created, param count: {n_params / 1e6:.2f}M. batch {args.batch}, "
          f"amp {amp_dtype if args.amp else 'off'}, channels_last {args.channels_last}, {device}, "
          f"{'CUDA graph' if cuda else 'no CUDA graph (cpu smoke mode)'}")

    with torch.no_grad():
        if cuda:
            # warm up on a side stream (cudnn.benchmark picks its algorithms here, not in the capture)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(args.warmup):
                    with autocast():
                        model(static_input)
            torch.cuda.current_stream().wait_stream(s)

            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                with autocast():
                    static_output = model(static_input)
            torch.cuda.synchronize()

            def forward():
                g.replay()
                return static_output
        else:
            for _ in range(args.warmup):
                with autocast():
                    model(static_input)

            def forward():
                with autocast():
                    return model(static_input)

        def sync():
            if cuda:
                torch.cuda.synchronize()

        sync()
        t0 = time.perf_counter()
        for i in range(args.iters):
            static_input.copy_(batches[i % len(batches)])
            out = forward().clone()
        sync()
        elapsed = time.perf_counter() - t0
    assert out.shape == (args.batch, 1000)

    ms_per_batch = elapsed / args.iters * 1e3
    images_per_s = args.batch * args.iters / elapsed
    print(f"Inference benchmark of {args.model} done ({'CUDA graph replay' if cuda else 'eager, cpu smoke mode'}). "
          f"{images_per_s:.2f} samples/sec, {ms_per_batch:.3f} ms/step")
    print("RESULT " + json.dumps({"program": "graph_infer", "model": args.model, "step": "one batch: input copy, graph replay, output clone",
                                  "ms_per_step": round(ms_per_batch, 4), "ms_per_batch": round(ms_per_batch, 4),
                                  "images_per_s": round(images_per_s, 2), "batch": args.batch, "amp": args.amp,
                                  "channels_last": args.channels_last, "graph": cuda, "iters": args.iters, "device": str(device)}))


if __name__ == "__main__":
    main()
