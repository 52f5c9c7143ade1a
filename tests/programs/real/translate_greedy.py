"""Greedy translation as PyTorch's "Language Translation with nn.Transformer" tutorial
writes it (random weights, synthetic source sentences): a Seq2SeqTransformer around
nn.Transformer with ``encode`` and ``decode`` methods, and ``greedy_decode`` calling
``model.encode`` once per sentence, then per output token ``model.decode`` on the whole
prefix (no KV cache), ``model.generator`` on the last position, ``torch.max`` and
``.item()``, stopping at EOS or ``--max-len``. Each sentence is timed whole; the speed is
tokens per second over the generated tokens.

    python translate_greedy.py                                # CUDA
    python translate_greedy.py --device cpu --dim 64 --heads 4 --layers 2 --ffn 128 --vocab 500 --sentences 4
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
from torch import Tensor

PAD_IDX, BOS_IDX, EOS_IDX = 1, 2, 3


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size, tgt_vocab_size,
                 dim_feedforward=512, dropout=0.1):
        super().__init__()
        self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                          num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                          dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask,
                                memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)


def generate_square_subsequent_mask(sz, device):
    mask = (torch.triu(torch.ones((sz, sz), device=device)) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))


def greedy_decode(model, src, src_mask, max_len, start_symbol, device):
    src, src_mask = src.to(device), src_mask.to(device)
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(device)
    for i in range(max_len - 1):
        memory = memory.to(device)
        tgt_mask = (generate_square_subsequent_mask(ys.size(0), device).type(torch.bool)).to(device)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--sentences", type=int, default=20)
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--max-len", type=int, default=None, help="default: source length + 5, as the tutorial")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(args.layers, args.layers, args.dim, args.heads, args.vocab, args.vocab, args.ffn).to(device)
    for p_ in model.parameters():
        if p_.dim() > 1:
            nn.init.xavier_uniform_(p_)
    model.eval()
    # the weights are random: EOS never wins, so every sentence runs to max_len (and the token count is known)
    with torch.no_grad():
        model.generator.bias[EOS_IDX] = -1e4
    sentences = [torch.randint(4, args.vocab, (args.src_len + i % 5, 1)) for i in range(args.sentences + args.warmup)]
    times, tokens, tokens_each = [], 0, []
    with torch.no_grad():
        for i, src in enumerate(sentences):
            num_tokens = src.shape[0]
            src_mask = torch.zeros(num_tokens, num_tokens).type(torch.bool)
            t0 = time.perf_counter()
            tgt_tokens = greedy_decode(model, src, src_mask, max_len=args.max_len or num_tokens + 5, start_symbol=BOS_IDX,
                                       device=device).flatten()
            dt = time.perf_counter() - t0  # .item() per token: the last one synchronised
            tokens_each.append(len(tgt_tokens) - 1)
            if i >= args.warmup:
                times.append(dt)
                tokens += len(tgt_tokens) - 1
    ms = sum(times) / tokens * 1e3
    print(f"{len(times)} sentences, {tokens} tokens in {sum(times):.3f} s: {ms:.3f} ms/token, {tokens / sum(times):.1f} tokens/s")
    print("RESULT " + json.dumps({"program": "translate_greedy", "step": "decode token (model.decode + generator + item)",
                                  "ms_per_step": round(ms, 4), "ms_per_token": round(ms, 4),
                                  "tokens_per_s": round(tokens / sum(times), 2), "tokens": tokens, "warmup": args.warmup,
                                  "tokens_each": tokens_each, "ms_each": [round(t * 1e3, 4) for t in times],
                                  "device": str(device)}))


if __name__ == "__main__":
    main()
