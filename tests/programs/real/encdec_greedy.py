#!/usr/bin/env python3
"""Whisper-style speech-to-text greedy decoding written by hand (random weights): a conv
front end and a transformer encoder run once per utterance over its log-mel frames, then
a decoder loop, one token per call, with a self-attention KV cache and the encoder's
cross-attention keys/values computed once (the way openai/whisper's ``decoding.py`` and
most hand ports run it). No end-of-text: each utterance decodes ``--tokens`` tokens after
its ``--prompt`` start tokens, which the first decoder call takes at once.

Its own timer: ``torch.cuda.synchronize()`` + ``time.perf_counter()`` around each decoder
token (the decoder call, the argmax, the append), after one warm-up utterance; the encoder
is timed apart.

    python encdec_greedy.py                                      # whisper-small shape, cuda
    python encdec_greedy.py --device cpu --dim 64 --heads 4 --enc-layers 2 --dec-layers 2 \
        --frames 200 --vocab 512 --tokens 16 --utterances 2
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, xa=None, kv_cache=None):
        q = self.query(x)
        if xa is not None:  # cross-attention: the encoder's keys/values, computed once per utterance
            if kv_cache is not None and self in kv_cache:
                k, v = kv_cache[self]
            else:
                k, v = self.key(xa), self.value(xa)
                if kv_cache is not None:
                    kv_cache[self] = (k, v)
        else:
            k, v = self.key(x), self.value(x)
            if kv_cache is not None:
                if self in kv_cache:
                    k = torch.cat([kv_cache[self][0], k], dim=1)
                    v = torch.cat([kv_cache[self][1], v], dim=1)
                kv_cache[self] = (k, v)
        b, n, d = q.shape
        split = lambda t: t.view(b, t.shape[1], self.heads, d // self.heads).transpose(1, 2)
        causal = xa is None and n > 1
        out = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=causal)
        return self.out(out.transpose(1, 2).reshape(b, n, d))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, dim, heads, cross=False):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(dim, heads), nn.LayerNorm(dim)
        self.cross_attn = MultiHeadAttention(dim, heads) if cross else None
        self.cross_attn_ln = nn.LayerNorm(dim) if cross else None
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.mlp_ln = nn.LayerNorm(dim)

    def forward(self, x, xa=None, kv_cache=None):
        x = x + self.attn(self.attn_ln(x), kv_cache=kv_cache)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, n_mels, n_ctx, dim, heads, layers):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", torch.randn(n_ctx, dim) * 0.02)
        self.blocks = nn.ModuleList(ResidualAttentionBlock(dim, heads) for _ in range(layers))
        self.ln_post = nn.LayerNorm(dim)

    def forward(self, mel):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        x = x + self.positional_embedding[: x.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    def __init__(self, vocab, n_ctx, dim, heads, layers):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.positional_embedding = nn.Parameter(torch.randn(n_ctx, dim) * 0.02)
        self.blocks = nn.ModuleList(ResidualAttentionBlock(dim, heads, cross=True) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, tokens, xa, kv_cache, offset):
        x = self.token_embedding(tokens) + self.positional_embedding[offset : offset + tokens.shape[-1]]
        for block in self.blocks:
            x = block(x, xa, kv_cache=kv_cache)
        return self.ln(x) @ self.token_embedding.weight.T


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def transcribe(encoder, decoder, mel, args, device, token_times):
    audio_features = encoder(mel)
    tokens = torch.full((1, args.prompt), 1, dtype=torch.long, device=device)  # <|startoftranscript|> ...
    kv_cache, offset, out = {}, 0, []
    for _ in range(args.tokens):
        sync(device)
        t0 = time.perf_counter()
        logits = decoder(tokens, audio_features, kv_cache, offset)
        offset += tokens.shape[-1]
        tokens = logits[:, -1].argmax(-1, keepdim=True)
        out.append(int(tokens))
        sync(device)
        token_times.append(time.perf_counter() - t0)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--enc-layers", type=int, default=12)
    p.add_argument("--dec-layers", type=int, default=12)
    p.add_argument("--mels", type=int, default=80)
    p.add_argument("--frames", type=int, default=3000, help="log-mel frames per utterance (3000: 30 s)")
    p.add_argument("--vocab", type=int, default=51865)
    p.add_argument("--prompt", type=int, default=4, help="start tokens the first decoder call takes")
    p.add_argument("--tokens", type=int, default=64, help="decoder calls (tokens) per utterance")
    p.add_argument("--utterances", type=int, default=3, help="timed utterances, after one warm-up")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    encoder = AudioEncoder(args.mels, args.frames // 2, args.dim, args.heads, args.enc_layers).to(device).eval()
    decoder = TextDecoder(args.vocab, 448, args.dim, args.heads, args.dec_layers).to(device).eval()
    mels = [torch.randn(1, args.mels, args.frames, device=device) for _ in range(args.utterances + 1)]

    transcribe(encoder, decoder, mels[0], args, device, [])  # warm-up
    token_times, t_total = [], time.perf_counter()
    for mel in mels[1:]:
        transcribe(encoder, decoder, mel, args, device, token_times)
    sync(device)
    t_total = time.perf_counter() - t_total
    ms = 1e3 * sum(token_times) / len(token_times)
    print(f"{args.utterances} utterances, {len(token_times)} tokens: {ms:.2f} ms/token, "
          f"{1e3 / ms:.1f} tokens/s ({t_total:.2f} s with the encoder)")
    print("RESULT " + json.dumps({"program": "encdec_greedy", "step": "decoder token", "ms_per_step": ms,
                                  "ms_per_token": ms, "tokens_per_s": 1e3 / ms, "tokens": len(token_times),
                                  "warmup_tokens": args.tokens, "ms_each": [round(1e3 * t, 4) for t in token_times]}))


if __name__ == "__main__":
    main()
