#!/usr/bin/env python3
"""ResNet training loop (torchvision architecture, random init) on a synthetic dataset whose
__getitem__ does real CPU work per image, like a JPEG decode + random-resized-crop + flip +
normalise: it draws a random uint8 HxWx3 image with numpy, crops, flips and normalises it.
Standard loop: DataLoader, AMP, SGD, zero_grad / backward / step; times itself.

    python train_loop.py                                  # resnet50, batch 128, AMP, cuda
    python train_loop.py --num-workers 4 --pin-memory
    python train_loop.py --device cpu --model resnet18 --batch 4 --img-size 64 --iters 4 --warmup 1
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


# ---------------------------------------------------------------------------- ResNet
# (torchvision.models.resnet, trimmed)

def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(**kwargs):
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


def resnet50(**kwargs):
    return ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)


MODELS = {"resnet50": resnet50, "resnet18": resnet18}

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255


class SyntheticImageNet(Dataset):
    """Random "photos": decode-sized uint8 images, random crop + flip + normalise on the CPU."""

    def __init__(self, length, img_size=224, src_size=None, num_classes=1000, seed=0):
        self.length = length
        self.img_size = img_size
        self.src_size = src_size or int(img_size * 1.14)  # e.g. 256 for 224
        self.num_classes = num_classes
        self.seed = seed

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        rng = np.random.default_rng(self.seed + index)
        # "decode"
        img = rng.integers(0, 256, size=(self.src_size, self.src_size, 3), dtype=np.uint8)
        # random crop + horizontal flip
        top, left = rng.integers(0, self.src_size - self.img_size + 1, size=2)
        img = img[top:top + self.img_size, left:left + self.img_size]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        # ToTensor + Normalize
        img = (img.astype(np.float32) - MEAN) / STD
        img = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
        target = int(rng.integers(0, self.num_classes))
        return img, target


def main():
    parser = argparse.ArgumentParser(description="PyTorch ResNet training (synthetic data)")
    parser.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    parser.add_argument("--batch", "-b", type=int, default=128)
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--iters", type=int, default=30, help="timed iterations")
    parser.add_argument("--warmup", type=int, default=5, help="iterations before the timer starts")
    parser.add_argument("--num-workers", "-j", type=int, default=0)
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--print-freq", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)

    model = MODELS[args.model]().to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    amp_dtype = torch.float16 if cuda else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and cuda)

    total_iters = args.warmup + args.iters
    dataset = SyntheticImageNet(total_iters * args.batch, img_size=args.img_size)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.num_workers,
                        pin_memory=args.pin_memory, drop_last=True, persistent_workers=args.num_workers > 0)
    print(f"=> training {args.model}, batch {args.batch}, {args.img_size}px, workers {args.num_workers}, "
          f"pin_memory {args.pin_memory}, amp {args.amp}, {device}")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    model.train()
    end = time.perf_counter()
    t0 = None
    for i, (images, target) in enumerate(loader):
        data_time = time.perf_counter() - end
        if i == args.warmup:
            sync()
            t0 = time.perf_counter()
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        if args.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)

        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=args.amp):
            output = model(images)
            loss = criterion(output, target)

        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

        if i % args.print_freq == 0 or i == total_iters - 1:
            print(f"Epoch: [0][{i:>4}/{total_iters}]  Time {time.perf_counter() - end:.3f}  "
                  f"Data {data_time:.3f}  Loss {loss.item():.4f}")
        end = time.perf_counter()
    sync()
    elapsed = time.perf_counter() - t0

    ms_per_iter = elapsed / args.iters * 1e3
    images_per_s = args.batch * args.iters / elapsed
    print(f"Train: {images_per_s:.1f} images/s, {ms_per_iter:.2f} ms/iter over {args.iters} iterations")
    print("RESULT " + json.dumps({"program": "train_loop", "model": args.model, "step": "training iteration",
                                  "ms_per_step": round(ms_per_iter, 4), "ms_per_iter": round(ms_per_iter, 4),
                                  "images_per_s": round(images_per_s, 2), "batch": args.batch,
                                  "num_workers": args.num_workers, "pin_memory": args.pin_memory, "amp": args.amp,
                                  "iters": args.iters, "device": str(device)}))


if __name__ == "__main__":
    main()
