#!/usr/bin/env python3
"""Object-detection evaluation as torchvision's references/detection/engine.py ``evaluate``
runs it: ``@torch.inference_mode()``, a DataLoader over images of different sizes with
``collate_fn=lambda batch: tuple(zip(*batch))`` (a tuple of image tensors, a tuple of target
dicts), ``for images, targets in metric_logger.log_every(data_loader, print_freq, header)``
(the references' ``MetricLogger.log_every``: a generator around the loader that times each
batch and prints ETA lines), ``images = list(img.to(device) for img in images)``,
``torch.cuda.synchronize()``, ``model_time`` around ``outputs = model(images)``, the outputs
moved to the CPU per image and collected for the COCO evaluator by image id.

The model is written here (torchvision is not installed): torchvision's
``GeneralizedRCNNTransform`` (normalise, resize each image so its short side is
``--min-size``, batch them into one zero-padded tensor divisible by 32), a small
ResNet-like backbone with an FPN-free head predicting per-location class scores and box
offsets (FCOS-style), and the postprocess torchvision's detectors do per image: score
threshold, top-k candidates, box decoding, clipping, class-wise NMS (written with tensors:
``torchvision.ops.batched_nms``' offset trick and a greedy loop), the boxes scaled back to
the original image's size.

Its own timer: each batch from ``log_every``'s ``end`` to the next (the fetch, the forward,
the evaluator's update), and ``model_time`` alone; RESULT's ``ms_per_step`` the mean batch
time after ``--warmup`` batches.

    python detect_infer.py                              # 800 px, batch 2, cuda
    python detect_infer.py --device cpu --min-size 128 --max-size 224 --images 24 --batch-size 2 --width 16
"""
import argparse
import datetime
import json
import math
import time
from collections import defaultdict, deque

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


# --- references/detection/utils.py ---

class SmoothedValue:
    def __init__(self, window_size=20, fmt="{median:.4f} ({global_avg:.4f})"):
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0
        self.fmt = fmt

    def update(self, value, n=1):
        self.deque.append(value)
        self.count += n
        self.total += value * n

    @property
    def median(self):
        return torch.tensor(list(self.deque)).median().item()

    @property
    def avg(self):
        return torch.tensor(list(self.deque), dtype=torch.float32).mean().item()

    @property
    def global_avg(self):
        return self.total / self.count

    @property
    def max(self):
        return max(self.deque)

    @property
    def value(self):
        return self.deque[-1]

    def __str__(self):
        return self.fmt.format(median=self.median, avg=self.avg, global_avg=self.global_avg, max=self.max, value=self.value)


class MetricLogger:
    def __init__(self, delimiter="\t"):
        self.meters = defaultdict(SmoothedValue)
        self.delimiter = delimiter
        self.batch_times = []

    def update(self, **kwargs):
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                v = v.item()
            self.meters[k].update(v)

    def __str__(self):
        return self.delimiter.join(f"{name}: {meter}" for name, meter in self.meters.items())

    def log_every(self, iterable, print_freq, header=None):
        i = 0
        if not header:
            header = ""
        start_time = time.time()
        end = time.perf_counter()
        iter_time = SmoothedValue(fmt="{avg:.4f}")
        data_time = SmoothedValue(fmt="{avg:.4f}")
        space_fmt = ":" + str(len(str(len(iterable)))) + "d"
        log_msg = self.delimiter.join([header, "[{0" + space_fmt + "}/{1}]", "eta: {eta}", "{meters}", "time: {time}",
                                       "data: {data}"])
        for obj in iterable:
            data_time.update(time.perf_counter() - end)
            yield obj
            iter_time.update(time.perf_counter() - end)
            self.batch_times.append(time.perf_counter() - end)
            if i % print_freq == 0 or i == len(iterable) - 1:
                eta_seconds = iter_time.global_avg * (len(iterable) - i)
                eta_string = str(datetime.timedelta(seconds=int(eta_seconds)))
                print(log_msg.format(i, len(iterable), eta=eta_string, meters=str(self), time=str(iter_time),
                                     data=str(data_time)))
            i += 1
            end = time.perf_counter()
        total_time = time.time() - start_time
        total_time_str = str(datetime.timedelta(seconds=int(total_time)))
        print(f"{header} Total time: {total_time_str} ({total_time / len(iterable):.4f} s / it)")


def collate_fn(batch):
    return tuple(zip(*batch))


# --- the model (torchvision's detector pieces, written small) ---

class GeneralizedRCNNTransform(nn.Module):
    def __init__(self, min_size, max_size, image_mean, image_std, size_divisible=32):
        super().__init__()
        self.min_size, self.max_size, self.size_divisible = min_size, max_size, size_divisible
        self.image_mean, self.image_std = image_mean, image_std

    def resize(self, image):
        h, w = image.shape[-2:]
        scale = min(self.min_size / min(h, w), self.max_size / max(h, w))
        return F.interpolate(image[None], scale_factor=scale, mode="bilinear", recompute_scale_factor=True,
                             align_corners=False)[0]

    def batch_images(self, images):
        max_size = [max(s) for s in zip(*[img.shape for img in images])]
        stride = float(self.size_divisible)
        max_size[1] = int(math.ceil(float(max_size[1]) / stride) * stride)
        max_size[2] = int(math.ceil(float(max_size[2]) / stride) * stride)
        batched = images[0].new_full([len(images)] + max_size, 0)
        for i in range(batched.shape[0]):
            img = images[i]
            batched[i, : img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
        return batched

    def forward(self, images):
        images = [img for img in images]
        mean = torch.as_tensor(self.image_mean, dtype=images[0].dtype, device=images[0].device)
        std = torch.as_tensor(self.image_std, dtype=images[0].dtype, device=images[0].device)
        images = [self.resize((img - mean[:, None, None]) / std[:, None, None]) for img in images]
        image_sizes = [tuple(img.shape[-2:]) for img in images]
        return self.batch_images(images), image_sizes


def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Backbone(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(conv_bn(3, width, 2), conv_bn(width, width, 1), conv_bn(width, 2 * width, 2),
                                  conv_bn(2 * width, 2 * width, 1), conv_bn(2 * width, 4 * width, 2),
                                  conv_bn(4 * width, 4 * width, 2), conv_bn(4 * width, 8 * width, 2))
        self.out_channels = 8 * width
        self.stride = 32

    def forward(self, x):
        return self.body(x)


class Head(nn.Module):
    def __init__(self, channels, num_classes):
        super().__init__()
        self.tower = nn.Sequential(conv_bn(channels, channels, 1), conv_bn(channels, channels, 1))
        self.cls_logits = nn.Conv2d(channels, num_classes, 3, padding=1)
        self.bbox_reg = nn.Conv2d(channels, 4, 3, padding=1)

    def forward(self, x):
        t = self.tower(x)
        return self.cls_logits(t), F.relu(self.bbox_reg(t))


def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b - inter)


def batched_nms(boxes, scores, idxs, iou_threshold):
    # torchvision.ops.boxes._batched_nms_coordinate_trick, then a greedy NMS
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    boxes = boxes + offsets[:, None]
    order = scores.argsort(descending=True)
    iou = box_iou(boxes[order], boxes[order])
    keep = torch.ones(len(order), dtype=torch.bool)
    suppressed = (iou > iou_threshold).triu(1).cpu()
    for i in range(len(order)):
        if keep[i]:
            keep &= ~suppressed[i]
    return order[keep.to(order.device)]


class FCOSLike(nn.Module):
    def __init__(self, num_classes, width, min_size, max_size, score_thresh=0.2, nms_thresh=0.6, detections_per_img=100,
                 topk_candidates=1000):
        super().__init__()
        self.transform = GeneralizedRCNNTransform(min_size, max_size, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        self.backbone = Backbone(width)
        self.head = Head(self.backbone.out_channels, num_classes)
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates

    def postprocess(self, cls_logits, bbox_reg, image_sizes, original_sizes):
        stride = self.backbone.stride
        detections = []
        for logits, reg, (h, w), (oh, ow) in zip(cls_logits, bbox_reg, image_sizes, original_sizes):
            c, fh, fw = logits.shape
            ys, xs = torch.meshgrid(torch.arange(fh, device=logits.device), torch.arange(fw, device=logits.device),
                                    indexing="ij")
            centers = torch.stack([xs, ys], -1).reshape(-1, 2).float() * stride + stride // 2
            scores = torch.sigmoid(logits).permute(1, 2, 0).reshape(-1)
            keep = scores > self.score_thresh
            scores, idx = scores[keep], keep.nonzero().squeeze(1)
            num_topk = min(self.topk_candidates, idx.size(0))
            scores, order = scores.topk(num_topk)
            idx = idx[order]
            loc, labels = idx // c, idx % c
            d = reg.permute(1, 2, 0).reshape(-1, 4)[loc] * stride
            boxes = torch.cat([centers[loc] - d[:, :2], centers[loc] + d[:, 2:]], 1)
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
            keep = batched_nms(boxes, scores, labels, self.nms_thresh)[: self.detections_per_img]
            ratio = torch.tensor([ow / w, oh / h, ow / w, oh / h], device=boxes.device)
            detections.append({"boxes": boxes[keep] * ratio, "scores": scores[keep], "labels": labels[keep]})
        return detections

    def forward(self, images):
        original_sizes = [tuple(img.shape[-2:]) for img in images]
        batch, image_sizes = self.transform(images)
        cls_logits, bbox_reg = self.head(self.backbone(batch))
        return self.postprocess(cls_logits, bbox_reg, image_sizes, original_sizes)


class RandomImages(Dataset):
    """COCO-like: RGB images of random sizes (aspect ratios 0.5 to 2) with a target dict."""

    def __init__(self, n, lo, hi, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.sizes = [(int(torch.randint(lo, hi + 1, (1,), generator=g)), int(torch.randint(lo, hi + 1, (1,), generator=g)))
                      for _ in range(n)]

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        h, w = self.sizes[i]
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, h, w, generator=g), {"image_id": i}


@torch.inference_mode()
def evaluate(model, data_loader, device, print_freq):
    cpu_device = torch.device("cpu")
    model.eval()
    metric_logger = MetricLogger(delimiter="  ")
    header = "Test:"
    results, model_times = {}, []
    for images, targets in metric_logger.log_every(data_loader, print_freq, header):
        images = list(img.to(device) for img in images)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        model_time = time.perf_counter()
        outputs = model(images)
        outputs = [{k: v.to(cpu_device) for k, v in t.items()} for t in outputs]
        model_time = time.perf_counter() - model_time
        model_times.append(model_time)
        res = {target["image_id"]: output for target, output in zip(targets, outputs)}
        evaluator_time = time.perf_counter()
        results.update(res)  # coco_evaluator.update(res)
        evaluator_time = time.perf_counter() - evaluator_time
        metric_logger.update(model_time=model_time, evaluator_time=evaluator_time)
    return results, metric_logger.batch_times, model_times


def main():
    p = argparse.ArgumentParser(description="Detection evaluation (torchvision references' engine.evaluate)")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch-size", "-b", type=int, default=2)
    p.add_argument("--min-size", type=int, default=800)
    p.add_argument("--max-size", type=int, default=1333)
    p.add_argument("--src-lo", type=int, default=None, help="smallest source image side (default min-size / 2)")
    p.add_argument("--src-hi", type=int, default=None, help="largest source image side (default max-size)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=91)
    p.add_argument("--workers", "-j", type=int, default=0)
    p.add_argument("--warmup", type=int, default=2, help="batches left out of RESULT's mean")
    p.add_argument("--print-freq", type=int, default=10)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    dataset = RandomImages(args.images, args.src_lo or args.min_size // 2, args.src_hi or args.max_size)
    data_loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
                             collate_fn=collate_fn)
    model = FCOSLike(args.num_classes, args.width, args.min_size, args.max_size).to(device)
    results, batch_times, model_times = evaluate(model, data_loader, device, args.print_freq)
    timed = batch_times[args.warmup:]
    ms = sum(timed) / len(timed) * 1e3
    model_ms = sum(model_times[args.warmup:]) / len(timed) * 1e3
    print(f"Averaged stats: {ms:.2f} ms/batch ({model_ms:.2f} ms in the model), {len(results)} images, "
          f"{sum(len(r['boxes']) for r in results.values())} detections")
    print("RESULT " + json.dumps({"program": "detect_infer", "step": "evaluation batch (a list of images)",
                                  "ms_per_step": round(ms, 4), "ms_per_batch": round(ms, 4), "ms_model": round(model_ms, 4),
                                  "images_per_s": round(args.batch_size / ms * 1e3, 2), "batches": len(batch_times),
                                  "warmup": args.warmup, "ms_each": [round(t * 1e3, 4) for t in batch_times],
                                  "device": str(device)}))


if __name__ == "__main__":
    main()
