#!/usr/bin/env python3
"""Ultralytics YOLOv8 detection as its docs write a camera loop: ``model = YOLO("yolov8n.yaml")``
then ``results = model.predict(frame, imgsz=..., verbose=False)`` per frame, each call timed.

The library's structure is kept where a profiler meets it (ultralytics 8.x, read from its
source; the layers are written here so the program needs no download and no torchvision):

- ``DetectionModel.__init__`` runs ``self.forward(torch.zeros(1, 3, 256, 256))`` directly, not
  through ``__call__``, to find the head's strides: every layer of the model is called once,
  each as an outermost module call, before any frame;
- ``Model.predict`` makes its predictor on the first call; the predictor wraps the model in an
  ``AutoBackend`` module (which fuses each Conv's BatchNorm into its conv) and warms it up
  with ``AutoBackend.warmup``, another direct ``forward`` call; then per frame a letterbox
  in numpy, ``AutoBackend.__call__`` under ``inference_mode``, and NMS on the raw boxes;
- the layers: ``Conv`` (conv, BatchNorm, SiLU), ``C2f``, ``SPPF``, ``Concat``,
  ``nn.Upsample`` and ``Detect`` (DFL box decoding), iterated by ``_predict_once`` with the
  ``f`` (from) index of each layer; ``Detect``'s bias initialised as the library does, so a
  random model detects nothing and NMS has little to do.

RESULT: ``ms_per_step``, the mean of the timed ``predict`` calls (the first ``--warmup`` left
out), ``ms_each`` every call, ``frames`` the timed calls, and the mean of the library's own
per-frame ``speed`` (preprocess, inference, postprocess).

    python yolo_predict.py                               # cuda, 640x480 frames, imgsz 640
    python yolo_predict.py --device cpu --imgsz 160 --frames 40 --warmup 5
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn


def autopad(k, p=None):
    return k // 2 if p is None else p


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None, g=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))

    def forward_fuse(self, x):
        return self.act(self.conv(x))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 3, 1)
        self.cv2 = Conv(c_, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C2f(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=False, e=0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, e=1.0) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Concat(nn.Module):
    def __init__(self, dimension=1):
        super().__init__()
        self.d = dimension

    def forward(self, x):
        return torch.cat(x, self.d)


class DFL(nn.Module):
    def __init__(self, c1=16):
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1)
        self.c1 = c1

    def forward(self, x):
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats, strides, offset=0.5):
    anchor_points, stride_tensor = [], []
    for i, stride in enumerate(strides):
        _, _, h, w = feats[i].shape
        sx = torch.arange(w, device=feats[i].device, dtype=feats[i].dtype) + offset
        sy = torch.arange(h, device=feats[i].device, dtype=feats[i].dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), stride, dtype=feats[i].dtype, device=feats[i].device))
    return torch.cat(anchor_points), torch.cat(stride_tensor)


class Detect(nn.Module):
    def __init__(self, nc, ch):
        super().__init__()
        self.nc, self.nl, self.reg_max = nc, len(ch), 16
        self.no = nc + self.reg_max * 4
        self.stride = torch.zeros(self.nl)
        c2, c3 = max(16, ch[0] // 4, self.reg_max * 4), max(ch[0], min(self.nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, self.nc, 1)) for x in ch)
        self.dfl = DFL(self.reg_max)
        self.shape = None

    def forward(self, x):
        for i in range(self.nl):
            x[i] = torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1)
        if self.training:
            return x
        shape = x[0].shape
        if self.shape != shape:
            self.anchors, self.strides = (a.transpose(0, 1) for a in make_anchors(x, self.stride))
            self.shape = shape
        x_cat = torch.cat([xi.view(shape[0], self.no, -1) for xi in x], 2)
        box, cls = x_cat.split((self.reg_max * 4, self.nc), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        anchors = self.anchors.unsqueeze(0)
        x1y1, x2y2 = anchors - lt, anchors + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
        return torch.cat((dbox, cls.sigmoid()), 1), x

    def bias_init(self):
        for a, b, s in zip(self.cv2, self.cv3, self.stride):
            a[-1].bias.data[:] = 1.0
            b[-1].bias.data[: self.nc] = math.log(5 / self.nc / (640 / s) ** 2)


class DetectionModel(nn.Module):
    """yolov8n.yaml's backbone and head, ``width`` and ``depth`` its multiples."""

    def __init__(self, ch=3, nc=80, width=0.25, depth=0.33):
        super().__init__()
        w = lambda c: max(8, int(math.ceil(c * width / 8) * 8))  # noqa: E731
        d = lambda n: max(round(n * depth), 1)  # noqa: E731
        # (from, module, args): the yaml's rows
        rows = [
            (-1, Conv, (ch, w(64), 3, 2)), (-1, Conv, (w(64), w(128), 3, 2)), (-1, C2f, (w(128), w(128), d(3), True)),
            (-1, Conv, (w(128), w(256), 3, 2)), (-1, C2f, (w(256), w(256), d(6), True)),
            (-1, Conv, (w(256), w(512), 3, 2)), (-1, C2f, (w(512), w(512), d(6), True)),
            (-1, Conv, (w(512), w(1024), 3, 2)), (-1, C2f, (w(1024), w(1024), d(3), True)), (-1, SPPF, (w(1024), w(1024), 5)),
            (-1, nn.Upsample, (None, 2, "nearest")), ([-1, 6], Concat, (1,)), (-1, C2f, (w(1024) + w(512), w(512), d(3))),
            (-1, nn.Upsample, (None, 2, "nearest")), ([-1, 4], Concat, (1,)), (-1, C2f, (w(512) + w(256), w(256), d(3))),
            (-1, Conv, (w(256), w(256), 3, 2)), ([-1, 12], Concat, (1,)), (-1, C2f, (w(256) + w(512), w(512), d(3))),
            (-1, Conv, (w(512), w(512), 3, 2)), ([-1, 9], Concat, (1,)), (-1, C2f, (w(512) + w(1024), w(1024), d(3))),
            ([15, 18, 21], Detect, (nc, [w(256), w(512), w(1024)])),
        ]
        layers, self.save = [], []
        for i, (f, m, args) in enumerate(rows):
            m_ = m(*args)
            m_.f, m_.i = f, i
            self.save.extend(x % i for x in ([f] if isinstance(f, int) else f) if x != -1)
            layers.append(m_)
        self.model = nn.Sequential(*layers)
        self.save = sorted(self.save)
        m = self.model[-1]
        s = 256  # the strides: one forward of zeros, called directly, as the library does
        m.stride = torch.tensor([s / x.shape[-2] for x in self.forward(torch.zeros(1, ch, s, s))])
        self.stride = m.stride
        m.bias_init()
        for mod in self.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.eps, mod.momentum = 1e-3, 0.03

    def forward(self, x):
        return self._predict_once(x)

    def _predict_once(self, x):
        y = []
        for m in self.model:
            if m.f != -1:
                x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
            x = m(x)
            y.append(x if m.i in self.save else None)
        return x

    def fuse(self):
        for m in self.model.modules():
            if isinstance(m, Conv) and hasattr(m, "bn"):
                conv, bn = m.conv, m.bn
                fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                                  groups=conv.groups, bias=True).requires_grad_(False).to(conv.weight.device)
                scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
                fused.weight.copy_(conv.weight * scale.view(-1, 1, 1, 1))
                fused.bias.copy_(bn.bias - bn.running_mean * scale)
                m.conv = fused
                delattr(m, "bn")
                m.forward = m.forward_fuse
        return self


class AutoBackend(nn.Module):
    def __init__(self, model, device, fuse=True):
        super().__init__()
        model = model.to(device)
        self.model = (model.fuse() if fuse else model).eval()
        self.device = device

    def forward(self, im):
        return self.model(im)

    def warmup(self, imgsz=(1, 3, 640, 640)):
        im = torch.empty(*imgsz, dtype=torch.float, device=self.device)
        self.forward(im)


def letterbox(img, new_shape, stride=32):
    h, w = img.shape[:2]
    r = min(new_shape / h, new_shape / w)
    nh, nw = int(round(h * r)), int(round(w * r))
    ys = (np.arange(nh) * (h / nh)).astype(np.int64)  # nearest-neighbour resize (cv2.resize's place)
    xs = (np.arange(nw) * (w / nw)).astype(np.int64)
    resized = img[ys][:, xs]
    ph, pw = (new_shape - nh) % stride or 0, (new_shape - nw) % stride or 0
    top, left = ph // 2, pw // 2
    out = np.full((nh + ph, nw + pw, 3), 114, dtype=np.uint8)
    out[top:top + nh, left:left + nw] = resized
    return out


def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    inter = (rb - lt).clamp(0).prod(2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b) - inter)


def nms(boxes, scores, iou_thres):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel():
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        order = order[1:][box_iou(boxes[i][None], boxes[order[1:]])[0] <= iou_thres]
    return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long, device=boxes.device)


def non_max_suppression(pred, conf_thres=0.25, iou_thres=0.7, max_det=300):
    nc = pred.shape[1] - 4
    xc = pred[:, 4:].amax(1) > conf_thres
    out = []
    for xi, x in enumerate(pred.transpose(-1, -2)):
        x = x[xc[xi]]
        if not x.shape[0]:
            out.append(torch.zeros((0, 6), device=pred.device))
            continue
        box, cls = x.split((4, nc), 1)
        box = torch.cat((box[:, :2] - box[:, 2:] / 2, box[:, :2] + box[:, 2:] / 2), 1)
        conf, j = cls.max(1, keepdim=True)
        x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > conf_thres]
        i = nms(x[:, :4] + x[:, 5:6] * 7680, x[:, 4], iou_thres)[:max_det]
        out.append(x[i])
    return out


class Profile:
    def __init__(self, device):
        self.cuda, self.t = device.type == "cuda", 0.0

    def __enter__(self):
        self.start = self.time()
        return self

    def __exit__(self, *exc):
        self.t = self.time() - self.start

    def time(self):
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


class Results:
    def __init__(self, boxes, speed):
        self.boxes, self.speed = boxes, speed


class DetectionPredictor:
    def __init__(self, imgsz, device):
        self.imgsz, self.device, self.model, self.done_warmup = imgsz, device, None, False

    def setup_model(self, model):
        self.model = AutoBackend(model, self.device)

    def preprocess(self, frames):
        im = np.stack([letterbox(f, self.imgsz) for f in frames])[..., ::-1].transpose(0, 3, 1, 2)  # BGR to RGB, BCHW
        im = torch.from_numpy(np.ascontiguousarray(im)).to(self.device)
        return im.float() / 255

    @torch.inference_mode()
    def __call__(self, source, model):
        if self.model is None:
            self.setup_model(model)
        if not self.done_warmup:
            self.model.warmup(imgsz=(1, 3, self.imgsz, self.imgsz))
            self.done_warmup = True
        frames = source if isinstance(source, list) else [source]
        profilers = [Profile(self.device) for _ in range(3)]
        with profilers[0]:
            im = self.preprocess(frames)
        with profilers[1]:
            preds = self.model(im)
        with profilers[2]:
            dets = non_max_suppression(preds[0])
        speed = {k: p.t * 1e3 / len(frames) for k, p in zip(("preprocess", "inference", "postprocess"), profilers)}
        return [Results(d, speed) for d in dets]


class YOLO(nn.Module):
    """ultralytics.engine.model.Model: an nn.Module holding the model and its predictor."""

    def __init__(self, device):
        super().__init__()
        self.model = DetectionModel()
        self.device, self.predictor = device, None

    def predict(self, source, imgsz=640, verbose=False):
        if self.predictor is None:
            self.predictor = DetectionPredictor(imgsz, self.device)
        return self.predictor(source, self.model)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--frames", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5, help="calls left out of the mean")
    args = p.parse_args()
    device = torch.device(args.device)
    model = YOLO(device)  # YOLO("yolov8n.yaml"): built from its config, random weights
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8) for _ in range(args.frames)]
    each, speeds = [], []
    for frame in frames:
        t0 = time.perf_counter()
        results = model.predict(frame, imgsz=args.imgsz, verbose=False)
        each.append((time.perf_counter() - t0) * 1e3)
        speeds.append(results[0].speed)
    timed = each[args.warmup:]
    speed = {k: round(float(np.mean([s[k] for s in speeds[args.warmup:]])), 3) for k in speeds[0]}
    print(f"{len(timed)} frames: {np.mean(timed):.2f} ms per frame; speed {speed}")
    print("RESULT " + json.dumps({"ms_per_step": float(np.mean(timed)), "frames": len(timed), "warmup": args.warmup,
                                  "ms_each": [round(t, 3) for t in each], "speed": speed}))


if __name__ == "__main__":
    main()
