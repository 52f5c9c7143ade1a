#!/usr/bin/env python3
"""PyTorch's "NLP From Scratch: Translation with a Sequence to Sequence Network and Attention"
tutorial's training as its classic version writes it: ``trainIters`` draws random sentence
pairs (no DataLoader, batch 1) and ``train`` runs, per pair, ``encoder_optimizer.zero_grad()``
and ``decoder_optimizer.zero_grad()``, the ``EncoderRNN`` (a GRU) once per input token, the
``AttnDecoderRNN`` once per output token (teacher forcing half of the time, else its own
greedy guess until EOS), ``loss.backward()``, then ``encoder_optimizer.step()`` and
``decoder_optimizer.step()``; two SGD optimizers of one class (``--decoder-optim adam``: an Adam
for the decoder, two classes). Sentences are random token ids of random lengths (no
download). Each pair's ``train`` call is timed; the first ``--warmup`` left out.

    python seq2seq_train.py                               # CUDA
    python seq2seq_train.py --device cpu --iters 30      # CPU
"""
import argparse
import json
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

SOS_token, EOS_token = 0, 1


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)

    def forward(self, input, hidden):
        embedded = self.embedding(input).view(1, 1, -1)
        output, hidden = self.gru(embedded, hidden)
        return output, hidden

    def initHidden(self, device):
        return torch.zeros(1, 1, self.hidden_size, device=device)


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, max_length, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attn = nn.Linear(hidden_size * 2, max_length)
        self.attn_combine = nn.Linear(hidden_size * 2, hidden_size)
        self.dropout = nn.Dropout(dropout_p)
        self.gru = nn.GRU(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input).view(1, 1, -1))
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = F.relu(self.attn_combine(torch.cat((embedded[0], attn_applied[0]), 1)).unsqueeze(0))
        output, hidden = self.gru(output, hidden)
        return F.log_softmax(self.out(output[0]), dim=1), hidden, attn_weights


def train(input_tensor, target_tensor, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion, max_length,
          teacher_forcing_ratio, device):
    encoder_hidden = encoder.initHidden(device)
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    input_length, target_length = input_tensor.size(0), target_tensor.size(0)
    encoder_outputs = torch.zeros(max_length, encoder.hidden_size, device=device)
    loss = 0
    for ei in range(input_length):
        encoder_output, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
        encoder_outputs[ei] = encoder_output[0, 0]
    decoder_input = torch.tensor([[SOS_token]], device=device)
    decoder_hidden = encoder_hidden
    if random.random() < teacher_forcing_ratio:
        for di in range(target_length):  # teacher forcing: the target is the next input
            decoder_output, decoder_hidden, _ = decoder(decoder_input, decoder_hidden, encoder_outputs)
            loss += criterion(decoder_output, target_tensor[di])
            decoder_input = target_tensor[di]
    else:
        for di in range(target_length):  # its own predictions as the next input
            decoder_output, decoder_hidden, _ = decoder(decoder_input, decoder_hidden, encoder_outputs)
            topv, topi = decoder_output.topk(1)
            decoder_input = topi.squeeze().detach()
            loss += criterion(decoder_output, target_tensor[di])
            if decoder_input.item() == EOS_token:
                break
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    return loss.item() / target_length


def random_pair(vocab, max_length, device):
    def sentence():
        ids = [random.randrange(2, vocab) for _ in range(random.randint(3, max_length - 1))] + [EOS_token]
        return torch.tensor(ids, dtype=torch.long, device=device).view(-1, 1)

    return sentence(), sentence()


def main():
    p = argparse.ArgumentParser(description="the seq2seq translation tutorial's trainIters")
    p.add_argument("--device", default="cuda")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=4000)
    p.add_argument("--max-length", type=int, default=10)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--teacher-forcing", type=float, default=0.5)
    p.add_argument("--decoder-optim", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--print-every", type=int, default=50)
    args = p.parse_args()
    random.seed(0)
    torch.manual_seed(0)
    device = torch.device(args.device)
    encoder = EncoderRNN(args.vocab, args.hidden).to(device)
    decoder = AttnDecoderRNN(args.hidden, args.vocab, args.max_length).to(device)
    encoder_optimizer = optim.SGD(encoder.parameters(), lr=args.lr)
    if args.decoder_optim == "adam":
        decoder_optimizer = optim.Adam(decoder.parameters(), lr=args.lr / 10)
    else:
        decoder_optimizer = optim.SGD(decoder.parameters(), lr=args.lr)
    training_pairs = [random_pair(args.vocab, args.max_length, device) for _ in range(args.iters)]
    criterion = nn.NLLLoss()
    ms_each, print_loss_total = [], 0.0
    for it in range(1, args.iters + 1):
        input_tensor, target_tensor = training_pairs[it - 1]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = train(input_tensor, target_tensor, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion,
                     args.max_length, args.teacher_forcing, device)
        ms_each.append((time.perf_counter() - t0) * 1e3)  # loss.item() synchronized
        print_loss_total += loss
        if it % args.print_every == 0:
            print(f"iter {it} ({it / args.iters * 100:.0f}%) loss {print_loss_total / args.print_every:.4f}")
            print_loss_total = 0.0
    timed = ms_each[args.warmup:]
    ms = sum(timed) / len(timed)
    print(f"{len(timed)} iterations: {ms:.2f} ms/iter")
    print("RESULT " + json.dumps({"program": "seq2seq_train", "step": "one train() call: both optimizers' steps",
                                  "iters": args.iters, "warmup": args.warmup, "ms_each": ms_each, "ms_per_step": ms,
                                  "ms_per_iter": ms}))


if __name__ == "__main__":
    main()
