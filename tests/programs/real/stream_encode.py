#!/usr/bin/env python3
"""Streaming speech recognition encoder, chunk by chunk, as WeNet's
``BaseEncoder.forward_chunk_by_chunk`` decodes a long utterance: a conv2d subsampling front
end (4x), conformer-like layers (self-attention over the chunk plus a cache of the
``--left-chunks`` chunks before it, a causal depthwise convolution keeping its last
``kernel - 1`` frames as a cache), the ``att_cache`` and ``cnn_cache`` tensors carried from
chunk to chunk and trimmed to the left context, ``offset`` advanced by each chunk's
output; per chunk a CTC greedy search on the host (argmax, ``.tolist()``, blanks and repeats
collapsed) as the runtime's partial result. The encoder's ``forward_chunk`` is a method, not
``forward``: the loop over chunks calls ``self.forward_chunk(...)`` directly, which calls the
embedding and the layers as modules. ``--utterances`` long inputs, one after the other,
``torch.inference_mode()``.

Its own timer: ``time.perf_counter()`` per chunk (its slice, ``forward_chunk``, the CTC
step); RESULT's ``ms_per_step`` the mean chunk time over all but the first utterance.

    python stream_encode.py                          # 12 layers of 256, 16-frame chunks, cuda
    python stream_encode.py --device cpu --dim 64 --heads 4 --layers 2 --frames 1200 --chunk 16 --utterances 3
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv2dSubsampling4(nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)
        self.subsampling_rate = 4
        self.right_context = 6  # (3 - 1) * 1 + (3 - 1) * 2

    def forward(self, x, offset):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        pos = position_encoding(offset, x.size(1), x.size(2), x.device)
        return x * math.sqrt(x.size(2)) + pos, pos


def position_encoding(offset, size, d, device):
    position = torch.arange(offset, offset + size, device=device).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, device=device) * -(math.log(10000.0) / d))
    pe = torch.zeros(size, d, device=device)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)

    def forward(self, x, cache):
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        if cache.size(0) > 0:
            key_cache, value_cache = torch.split(cache, cache.size(-1) // 2, dim=-1)
            k = torch.cat([key_cache, k], dim=2)
            v = torch.cat([value_cache, v], dim=2)
        new_cache = torch.cat((k, v), dim=-1)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, -1)), new_cache


class ConvolutionModule(nn.Module):
    def __init__(self, channels, kernel_size=15):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)
        self.lorder = kernel_size - 1

    def forward(self, x, cache):
        x = x.transpose(1, 2)
        if cache.size(2) == 0:
            x = F.pad(x, (self.lorder, 0), "constant", 0.0)
        else:
            x = torch.cat((cache, x), dim=2)
        new_cache = x[:, :, -self.lorder:]
        x = F.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(x)
        x = F.silu(self.norm(x.transpose(1, 2)).transpose(1, 2))
        return self.pointwise_conv2(x).transpose(1, 2), new_cache


class ConformerEncoderLayer(nn.Module):
    def __init__(self, size, heads):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, size)
        self.feed_forward = nn.Sequential(nn.Linear(size, 4 * size), nn.SiLU(), nn.Linear(4 * size, size))
        self.conv_module = ConvolutionModule(size)
        self.norm_ff, self.norm_mha, self.norm_conv, self.norm_final = (nn.LayerNorm(size) for _ in range(4))

    def forward(self, x, att_cache, cnn_cache):
        x_att, new_att_cache = self.self_attn(self.norm_mha(x), att_cache)
        x = x + x_att
        x_conv, new_cnn_cache = self.conv_module(self.norm_conv(x), cnn_cache)
        x = x + x_conv
        x = x + 0.5 * self.feed_forward(self.norm_ff(x))
        return self.norm_final(x), new_att_cache, new_cnn_cache


class ConformerEncoder(nn.Module):
    def __init__(self, input_size, output_size, heads, num_blocks):
        super().__init__()
        self.embed = Conv2dSubsampling4(input_size, output_size)
        self.encoders = nn.ModuleList(ConformerEncoderLayer(output_size, heads) for _ in range(num_blocks))
        self.after_norm = nn.LayerNorm(output_size)

    def forward_chunk(self, xs, offset, required_cache_size, att_cache, cnn_cache):
        """One chunk: returns its output and the new caches (WeNet's signature)."""
        xs, _ = self.embed(xs, offset)
        elayers = len(self.encoders)
        cache_t1 = att_cache.size(2)
        r_att_cache, r_cnn_cache = [], []
        for i, layer in enumerate(self.encoders):
            xs, new_att_cache, new_cnn_cache = layer(
                xs, att_cache[i:i + 1] if elayers > 0 and cache_t1 > 0 else att_cache,
                cnn_cache[i] if cnn_cache.size(0) > 0 else cnn_cache)
            if required_cache_size > 0:
                r_att_cache.append(new_att_cache[:, :, -required_cache_size:, :])
            else:
                r_att_cache.append(new_att_cache[:, :, 0:, :])
            r_cnn_cache.append(new_cnn_cache.unsqueeze(0))
        xs = self.after_norm(xs)
        return xs, torch.cat(r_att_cache, dim=0), torch.cat(r_cnn_cache, dim=0)

    def forward_chunk_by_chunk(self, xs, decoding_chunk_size, num_decoding_left_chunks, ctc, on_chunk):
        subsampling = self.embed.subsampling_rate
        context = self.embed.right_context + 1  # Add current frame
        stride = subsampling * decoding_chunk_size
        decoding_window = (decoding_chunk_size - 1) * subsampling + context
        num_frames = xs.size(1)
        att_cache = torch.zeros((0, 0, 0, 0), device=xs.device)
        cnn_cache = torch.zeros((0, 0, 0, 0), device=xs.device)
        outputs, offset = [], 0
        required_cache_size = decoding_chunk_size * num_decoding_left_chunks
        # Feed forward overlap input step by step
        for cur in range(0, num_frames - context + 1, stride):
            end = min(cur + decoding_window, num_frames)
            chunk_xs = xs[:, cur:end, :]
            y, att_cache, cnn_cache = self.forward_chunk(chunk_xs, offset, required_cache_size, att_cache, cnn_cache)
            outputs.append(y)
            offset += y.size(1)
            on_chunk(ctc(y))
        return torch.cat(outputs, 1)


class CTC(nn.Module):
    def __init__(self, odim, vocab):
        super().__init__()
        self.ctc_lo = nn.Linear(odim, vocab)

    def log_softmax(self, hs):
        return F.log_softmax(self.ctc_lo(hs), dim=2)


def main():
    p = argparse.ArgumentParser(description="Streaming conformer encoder, chunk by chunk (WeNet's decoding loop)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--feat", type=int, default=80)
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--frames", type=int, default=6000, help="fbank frames per utterance (10 ms each)")
    p.add_argument("--chunk", type=int, default=16, help="decoding_chunk_size (output frames)")
    p.add_argument("--left-chunks", type=int, default=4, help="num_decoding_left_chunks")
    p.add_argument("--utterances", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    encoder = ConformerEncoder(args.feat, args.dim, args.heads, args.layers).to(device).eval()
    ctc = CTC(args.dim, args.vocab).to(device).eval()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    chunk_ms, chunks_each = [], []
    with torch.inference_mode():
        for u in range(args.utterances):
            feats = torch.randn(1, args.frames, args.feat, device=device)
            hyp, prev = [], 0
            times = []

            def on_chunk(logp):
                # the runtime's partial result: CTC greedy search on this chunk
                nonlocal prev
                for tok in logp.argmax(-1)[0].tolist():
                    if tok != 0 and tok != prev:
                        hyp.append(tok)
                    prev = tok
                sync()
                now = time.perf_counter()
                times.append((now - last[0]) * 1e3)
                last[0] = now

            sync()
            last = [time.perf_counter()]
            out = encoder.forward_chunk_by_chunk(feats, args.chunk, args.left_chunks, ctc.log_softmax, on_chunk)
            chunk_ms.append(times)
            chunks_each.append(len(times))
            print(f"utterance {u}: {args.frames} frames -> {out.size(1)} encoder frames in {len(times)} chunks, "
                  f"{sum(times):.1f} ms ({sum(times) / len(times):.2f} ms/chunk, "
                  f"RTF {sum(times) / (args.frames * 10):.3f}), {len(hyp)} tokens")
    later = [t for ts in chunk_ms[1:] for t in ts] or chunk_ms[0]
    ms = sum(later) / len(later)
    print("RESULT " + json.dumps({"program": "stream_encode", "step": "one chunk (forward_chunk and its CTC step)",
                                  "ms_per_step": round(ms, 4), "ms_per_chunk": round(ms, 4), "chunks": sum(chunks_each),
                                  "chunks_each": chunks_each, "utterances": args.utterances,
                                  "rtf": round(ms / (args.chunk * 4 * 10), 4),
                                  "ms_each_utterance": [round(sum(ts), 3) for ts in chunk_ms], "device": str(device)}))


if __name__ == "__main__":
    main()
