#!/usr/bin/env python3
"""Two-stage OCR inference as PaddleOCR / EasyOCR-style scripts write it: per page a text
detector (a DBNet-like CNN giving a probability map), its boxes taken on the host (the
map thresholded, the highest peaks kept: how many varies per page), then per box the
recogniser (a CRNN: convolutions, a BiLSTM, greedy CTC decoding on the host) on the crop
resized to 32 px high. Random weights; the pages are random images. Its own timer: each
page from its image to its last line's text; RESULT's ``ms_per_step`` the mean page after
the warm-up ones.

    python ocr_pipeline.py                       # CUDA
    python ocr_pipeline.py --device cpu --pages 30
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class TextDetector(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, 2, 1), nn.BatchNorm2d(width), nn.ReLU())
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, x):
        return torch.sigmoid(self.head(self.down(x)))


class CRNN(nn.Module):
    def __init__(self, width=32, hidden=64, alphabet=96):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(width, width, 3, 1, 1), nn.ReLU(), nn.AdaptiveAvgPool2d((1, None)))
        self.rnn = nn.LSTM(width, hidden, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * hidden, alphabet + 1)

    def forward(self, x):
        seq = self.conv(x).squeeze(2).transpose(1, 2)
        return self.fc(self.rnn(seq)[0])


def main():
    p = argparse.ArgumentParser(description="text detection, then recognition per box")
    p.add_argument("--device", default="cuda")
    p.add_argument("--pages", type=int, default=100)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--max-boxes", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    det, rec = TextDetector().to(device).eval(), CRNN().to(device).eval()
    alphabet = [chr(c) for c in range(32, 128)]
    ms_each, lines_each = [], []
    with torch.inference_mode():
        for page in range(args.pages):
            t0 = time.perf_counter()
            image = torch.rand(1, 3, args.size, args.size, device=device)
            prob = det(image)[0, 0]
            n = 1 + page % args.max_boxes  # the lines found on this page
            peaks = prob.flatten().topk(n).indices.tolist()
            texts = []
            for i in peaks:
                y, x = divmod(i, prob.shape[1])
                y, x = y * 4, x * 4
                crop = image[:, :, max(0, y - 8): y + 8, max(0, x - 48): x + 48]
                crop = F.interpolate(crop, size=(32, 128), mode="bilinear", align_corners=False)
                best = rec(crop).argmax(-1)[0].tolist()
                texts.append("".join(alphabet[c - 1] for k, c in enumerate(best) if c and (k == 0 or c != best[k - 1])))
            if device.type == "cuda":
                torch.cuda.synchronize()
            ms_each.append((time.perf_counter() - t0) * 1e3)
            lines_each.append(len(texts))
    timed = ms_each[args.warmup:]
    ms = sum(timed) / len(timed)
    print(f"{args.pages} pages, {sum(lines_each)} lines, {ms:.3f} ms/page")
    print("RESULT " + json.dumps({"program": "ocr_pipeline", "step": "one page (detection, then each line's recognition)",
                                  "ms_per_step": round(ms, 4), "ms_per_page": round(ms, 4), "pages": args.pages,
                                  "lines": sum(lines_each), "warmup": args.warmup, "ms_each": [round(m, 4) for m in ms_each],
                                  "device": args.device}))


if __name__ == "__main__":
    main()
