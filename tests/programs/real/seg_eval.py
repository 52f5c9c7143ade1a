#!/usr/bin/env python3
"""Semantic-segmentation validation benchmark, as segmentation repositories write their
``val.py``: ``model.eval()``, ``torch.inference_mode()``, ``for images, masks in
tqdm(val_loader, desc="Validating")`` (tqdm's ``__iter__``: a generator around the
DataLoader that updates the bar), the logits upsampled to the label's size
(``F.interpolate``), ``argmax``, then the confusion matrix on the host
(``.cpu().numpy()``, ``np.bincount``) for the mean IoU. A small U-Net on random images and
masks; ``--passes`` passes over the loader, each with its own bar (the first a warm-up).

Its own timer: ``time.perf_counter()`` per batch from the previous batch's end (the fetch
through the bar included) to the end of its confusion-matrix update; RESULT's
``ms_per_step`` the mean over the passes after the first; ``tqdm_it_per_s`` the bar's own
average rate at each pass's end (``format_dict``'s ``n / elapsed``, its final "it/s").

    python seg_eval.py                            # 512x512, batch 8, cuda
    python seg_eval.py --device cpu --size 64 --batch 4 --images 32 --width 8 --passes 3
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes, width=32):
        super().__init__()
        w = width
        self.inc = double_conv(n_channels, w)
        self.down = nn.ModuleList([double_conv(w, 2 * w), double_conv(2 * w, 4 * w), double_conv(4 * w, 8 * w)])
        self.up_conv = nn.ModuleList([nn.ConvTranspose2d(8 * w, 4 * w, 2, 2), nn.ConvTranspose2d(4 * w, 2 * w, 2, 2),
                                      nn.ConvTranspose2d(2 * w, w, 2, 2)])
        self.up = nn.ModuleList([double_conv(8 * w, 4 * w), double_conv(4 * w, 2 * w), double_conv(2 * w, w)])
        self.outc = nn.Conv2d(w, n_classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.down:
            skips.append(down(F.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up_conv, up in zip(self.up_conv, self.up):
            x = up(torch.cat([skips.pop(), up_conv(x)], dim=1))
        return self.outc(x)


class RandomSegmentation(Dataset):
    def __init__(self, n, size, classes):
        self.n, self.size, self.classes = n, size, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, self.size, self.size, generator=g)
        mask = torch.randint(0, self.classes, (self.size, self.size), generator=g)
        return (image - 0.5) / 0.25, mask


def fast_hist(pred, label, n):
    k = (label >= 0) & (label < n)
    return np.bincount(n * label[k].astype(int) + pred[k], minlength=n ** 2).reshape(n, n)


def main():
    p = argparse.ArgumentParser(description="Segmentation validation benchmark (U-Net, tqdm, inference_mode)")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--classes", type=int, default=21)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = UNet(3, args.classes, args.width).to(device)
    model.eval()
    val_loader = DataLoader(RandomSegmentation(args.images, args.size, args.classes), batch_size=args.batch,
                            shuffle=False, num_workers=args.workers, pin_memory=device.type == "cuda")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    ms_each, rates = [], []
    with torch.inference_mode():
        for pass_ in range(args.passes):
            hist = np.zeros((args.classes, args.classes))
            times = []
            pbar = tqdm(val_loader, desc=f"Validating (pass {pass_})", unit="batch", mininterval=0.5)
            sync()
            end = time.perf_counter()
            for images, masks in pbar:
                images = images.to(device, non_blocking=True)
                logits = model(images)
                logits = F.interpolate(logits, size=masks.shape[-2:], mode="bilinear", align_corners=False)
                pred = logits.argmax(1)
                hist += fast_hist(pred.cpu().numpy().flatten(), masks.numpy().flatten(), args.classes)
                sync()
                now = time.perf_counter()
                times.append((now - end) * 1e3)
                end = now
            d = pbar.format_dict
            rates.append(d["n"] / d["elapsed"] if d["elapsed"] else 0.0)
            pbar.close()
            iou = np.diag(hist) / (hist.sum(1) + hist.sum(0) - np.diag(hist) + 1e-10)
            print(f"pass {pass_}: mIoU {np.nanmean(iou) * 100:.2f}, {sum(times) / len(times):.2f} ms/batch")
            ms_each.append(times)
    later = [t for ts in ms_each[1:] for t in ts] or ms_each[0]
    ms = sum(later) / len(later)
    print("RESULT " + json.dumps({"program": "seg_eval", "step": "validation batch", "ms_per_step": round(ms, 4),
                                  "ms_per_batch": round(ms, 4), "images_per_s": round(args.batch / ms * 1e3, 2),
                                  "batches": sum(len(ts) for ts in ms_each), "batches_per_pass": len(ms_each[0]),
                                  "passes": args.passes, "tqdm_it_per_s": [round(r, 3) for r in rates],
                                  "ms_each_pass": [round(sum(ts), 3) for ts in ms_each], "device": str(device)}))


if __name__ == "__main__":
    main()
