#!/usr/bin/env python3
"""PyTorch's "Transfer Learning for Computer Vision" tutorial's ``train_model`` (and the
"Finetuning Torchvision Models" tutorial's, alike): per epoch a ``'train'`` and a ``'val'``
phase, each over its own DataLoader; on every batch of *both* phases
``optimizer.zero_grad()``, the forward under ``torch.set_grad_enabled(phase == 'train')``,
then ``loss.backward()`` and ``optimizer.step()`` in ``'train'`` only; the best weights
kept by ``copy.deepcopy``; a ``StepLR`` stepped per epoch. The model is written here
(torchvision is not installed): a small ResNet-ish CNN with a new 2-class head, its
backbone frozen as the tutorial's "ConvNet as fixed feature extractor" (``--finetune``:
every layer trained). Random images and labels (no download). Each training batch timed
from the previous one's end (its fetch included), the first epoch left out.

    python transfer_train.py                                   # CUDA
    python transfer_train.py --device cpu --epochs 3 --train-batches 12 --val-batches 6 --img-size 32 --width 16
"""
import argparse
import copy
import json
import time

import torch
import torch.nn as nn
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class ResNetish(nn.Module):
    def __init__(self, width, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 4 * width, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.layers(self.stem(x))), 1))


def train_model(model, criterion, optimizer, scheduler, dataloaders, dataset_sizes, device, num_epochs, ms_each):
    best_model_wts = copy.deepcopy(model.state_dict())
    best_acc = 0.0
    for epoch in range(num_epochs):
        print(f"Epoch {epoch}/{num_epochs - 1}")
        for phase in ["train", "val"]:
            if phase == "train":
                model.train()
            else:
                model.eval()
            running_loss, running_corrects = 0.0, 0
            t0 = time.perf_counter()
            for inputs, labels in dataloaders[phase]:
                inputs, labels = inputs.to(device), labels.to(device)
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    outputs = model(inputs)
                    _, preds = torch.max(outputs, 1)
                    loss = criterion(outputs, labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += torch.sum(preds == labels.data)
                t1 = time.perf_counter()
                if phase == "train":
                    ms_each.append((t1 - t0) * 1e3)
                t0 = t1
            if phase == "train":
                scheduler.step()
            epoch_loss = running_loss / dataset_sizes[phase]
            epoch_acc = running_corrects.double() / dataset_sizes[phase]
            print(f"{phase} Loss: {epoch_loss:.4f} Acc: {epoch_acc:.4f}")
            if phase == "val" and epoch_acc > best_acc:
                best_acc = epoch_acc
                best_model_wts = copy.deepcopy(model.state_dict())
    model.load_state_dict(best_model_wts)
    return model


def main():
    p = argparse.ArgumentParser(description="the transfer learning tutorial's train_model")
    p.add_argument("--device", default="cuda")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-batches", type=int, default=40)
    p.add_argument("--val-batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--img-size", type=int, default=112)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--finetune", action="store_true", help="train every layer (default: the backbone frozen)")
    args = p.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    sizes = {"train": args.train_batches * args.batch_size, "val": args.val_batches * args.batch_size}
    data = {phase: TensorDataset(torch.randn(n, 3, args.img_size, args.img_size), torch.randint(0, 2, (n,))) for phase, n in sizes.items()}
    dataloaders = {phase: DataLoader(data[phase], batch_size=args.batch_size, shuffle=phase == "train") for phase in data}
    model = ResNetish(args.width)
    if not args.finetune:
        for param in model.parameters():
            param.requires_grad = False
    model.fc = nn.Linear(model.fc.in_features, 2)  # a new head: trainable
    model = model.to(device)
    params = model.parameters() if args.finetune else model.fc.parameters()
    optimizer = torch.optim.SGD(params, lr=0.001, momentum=0.9)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.1)
    ms_each = []
    train_model(model, nn.CrossEntropyLoss(), optimizer, scheduler, dataloaders, sizes, device, args.epochs, ms_each)
    timed = ms_each[args.train_batches:]
    ms = sum(timed) / len(timed)
    print(f"{len(timed)} training batches after the first epoch: {ms:.2f} ms/batch")
    print("RESULT " + json.dumps({"program": "transfer_train", "step": "one training batch (its fetch included), not a validation batch",
                                  "train_batches": len(ms_each), "epochs": args.epochs, "batches_per_epoch": args.train_batches,
                                  "ms_each": ms_each, "ms_per_step": ms, "ms_per_batch": ms}))


if __name__ == "__main__":
    main()
