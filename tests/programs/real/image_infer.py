#!/usr/bin/env python3
"""Inference benchmark: ResNet-50 (torchvision's architecture) or a small ViT (timm's
vit_small_patch16_224), random weights, random input, in the manner of timm's benchmark.py.

    python image_infer.py --batch 256 --amp                  # throughput
    python image_infer.py --batch 256 --amp --channels-last
    python image_infer.py --batch 1                          # latency
    python image_infer.py --model vit_small --batch 1
    python image_infer.py --batch 1 --torchcompile-mode reduce-overhead  # CUDA graphs
    python image_infer.py --device cpu --model resnet18 --batch 2 --img-size 64 --warmup 2 --iters 4
"""
import argparse
import json
import time
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F


from resnet import resnet18, resnet50  # noqa: E402  (beside this script)


# ---------------------------------------------------------------------------- ViT
# (timm.models.vision_transformer, trimmed)

class PatchEmbed(nn.Module):
    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2)  # NCHW -> NLC


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads)
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(self, img_size=224, patch_size=16, num_classes=1000, embed_dim=384, depth=12, num_heads=6,
                 mlp_ratio=4.0):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.patch_embed = PatchEmbed(img_size, patch_size, 3, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.patch_embed.num_patches + 1, embed_dim) * .02)
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_ratio, norm_layer) for _ in range(depth)])
        self.norm = norm_layer(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)
        nn.init.normal_(self.cls_token, std=1e-6)

    def forward_features(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.pos_embed
        x = self.blocks(x)
        return self.norm(x)

    def forward(self, x):
        x = self.forward_features(x)
        return self.head(x[:, 0])


def vit_small(img_size=224, **kwargs):
    return VisionTransformer(img_size=img_size, patch_size=16, embed_dim=384, depth=12, num_heads=6, **kwargs)


def vit_tiny(img_size=224, **kwargs):
    return VisionTransformer(img_size=img_size, patch_size=16, embed_dim=192, depth=12, num_heads=3, **kwargs)


MODELS = {"resnet50": resnet50, "resnet18": resnet18, "vit_small": vit_small, "vit_tiny": vit_tiny}


def add_model_args(parser, batch):
    """The model and input options this benchmark and graph_infer.py share (timm's names)."""
    parser.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    parser.add_argument("--batch", "-b", type=int, default=batch)
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--amp", action="store_true", help="torch.autocast (float16 on cuda, bfloat16 on cpu)")
    parser.add_argument("--amp-dtype", default=None, choices=["float16", "bfloat16"])
    parser.add_argument("--channels-last", action="store_true", help="model and input in NHWC")


def create_model(args, device):
    """(model in eval mode on ``device``, its parameter count), as timm's benchmark.py makes it."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(42)
    kwargs = {"img_size": args.img_size} if args.model.startswith("vit") else {}
    model = MODELS[args.model](**kwargs)
    n_params = sum(p.numel() for p in model.parameters())
    model = model.to(device).eval()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model, n_params


# ---------------------------------------------------------------------------- benchmark

def main():
    parser = argparse.ArgumentParser(description="PyTorch inference benchmark")
    add_model_args(parser, batch=256)
    parser.add_argument("--torchcompile-mode", default=None, help="torch.compile(model, mode=...), e.g. reduce-overhead")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model, n_params = create_model(args, device)
    if args.torchcompile_mode:
        model = torch.compile(model, mode=args.torchcompile_mode)
    amp_dtype = getattr(torch, args.amp_dtype) if args.amp_dtype else (torch.float16 if cuda else torch.bfloat16)
    autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype, enabled=args.amp)

    x = torch.randn(args.batch, 3, args.img_size, args.img_size, device=device)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    print(f"Model {args.model} created, param count: {n_params / 1e6:.2f}M. batch {args.batch}, "
          f"amp {amp_dtype if args.amp else 'off'}, channels_last {args.channels_last}, {device}")

    with torch.inference_mode():
        for _ in range(args.warmup):
            with autocast():
                model(x)
        sync()
        t0 = time.perf_counter()
        for i in range(args.iters):
            with autocast():
                out = model(x)
        sync()
        elapsed = time.perf_counter() - t0
    assert out.shape == (args.batch, 1000)

    ms_per_batch = elapsed / args.iters * 1e3
    images_per_s = args.batch * args.iters / elapsed
    print(f"Inference benchmark of {args.model} done. {images_per_s:.2f} samples/sec, {ms_per_batch:.3f} ms/step")
    print("RESULT " + json.dumps({"program": "image_infer", "model": args.model, "step": "forward of one batch",
                                  "ms_per_step": round(ms_per_batch, 4), "ms_per_batch": round(ms_per_batch, 4),
                                  "images_per_s": round(images_per_s, 2), "batch": args.batch, "amp": args.amp,
                                  "channels_last": args.channels_last, "torchcompile_mode": args.torchcompile_mode, "iters": args.iters, "device": str(device)}))


if __name__ == "__main__":
    main()
