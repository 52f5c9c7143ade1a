#!/usr/bin/env python3
"""3D segmentation inference as MONAI's tutorials write it (the spleen segmentation
notebook's validation): a ``monai.networks.nets.UNet``, per volume
``sliding_window_inference(inputs, roi_size, sw_batch_size, model)``, then the argmax mask to
the host. MONAI gathers ``sw_batch_size`` windows per model call with ``torch.cat``, so no
call's input is a view of the volume. ``--inferer sliding``: the ``SlidingWindowInferer``
object (``inferer(inputs, model)``), the way MONAI's bundles and engines call it; ``--inferer
patch``: a ``PatchInferer`` (a ``SlidingWindowSplitter``'s patches, ``torch.cat`` into batches,
an ``AvgMerger``), its newer API. Random volumes.

Its own timer: ``time.perf_counter()`` per volume (its windows, MONAI's stitching, the mask
on the host); RESULT's ``ms_each``, ``ms_per_step`` (their mean after ``--warmup``),
``volumes``, ``calls`` (model calls per volume, counted by a forward pre-hook).

    python monai_seg.py                                            # 160^3 windows of 224^3 volumes, cuda
    python monai_seg.py --device cpu --size 64 --roi 32 --volumes 12 --channels 8,16,32
"""
import argparse
import json
import time

import torch
from monai.inferers import AvgMerger, PatchInferer, SlidingWindowInferer, SlidingWindowSplitter, sliding_window_inference
from monai.networks.layers import Norm
from monai.networks.nets import UNet


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", type=int, default=224, help="volume edge (voxels)")
    p.add_argument("--roi", type=int, default=160, help="window edge (roi_size)")
    p.add_argument("--sw-batch", type=int, default=4, help="sw_batch_size: windows per model call")
    p.add_argument("--overlap", type=float, default=0.25)
    p.add_argument("--channels", default="16,32,64,128,256")
    p.add_argument("--volumes", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--inferer", choices=["function", "sliding", "patch"], default="function",
                   help="sliding_window_inference, a SlidingWindowInferer or a PatchInferer")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    channels = tuple(int(c) for c in args.channels.split(","))
    model = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=channels, strides=(2,) * (len(channels) - 1),
                 num_res_units=2, norm=Norm.BATCH).to(device).eval()
    calls = []
    model.register_forward_pre_hook(lambda module, inputs: calls.append(1))
    roi = (args.roi,) * 3
    if args.inferer == "patch":
        inferer = PatchInferer(splitter=SlidingWindowSplitter(patch_size=roi, overlap=args.overlap), merger_cls=AvgMerger,
                               batch_size=args.sw_batch, device=device)  # the merger's buffers (AvgMerger's default: the CPU)
    else:
        inferer = SlidingWindowInferer(roi_size=roi, sw_batch_size=args.sw_batch, overlap=args.overlap)
    volumes = [torch.randn(1, 1, args.size, args.size, args.size) for _ in range(args.volumes)]
    ms_each, calls_each = [], []
    with torch.no_grad():
        for volume in volumes:
            t0 = time.perf_counter()
            inputs = volume.to(device)
            before = len(calls)
            if args.inferer != "function":
                outputs = inferer(inputs, model)
            else:
                outputs = sliding_window_inference(inputs, roi, args.sw_batch, model, overlap=args.overlap)
            mask = torch.argmax(outputs, dim=1).cpu().numpy()
            ms_each.append((time.perf_counter() - t0) * 1e3)
            calls_each.append(len(calls) - before)
    steady = ms_each[args.warmup:]
    print(f"{sum(steady) / len(steady):.1f} ms per volume ({calls_each[-1]} model calls, mask {mask.shape})")
    print("RESULT " + json.dumps({"volumes": args.volumes, "calls": calls_each[-1], "ms_each": ms_each,
                                  "ms_per_step": sum(steady) / len(steady)}))


if __name__ == "__main__":
    main()
