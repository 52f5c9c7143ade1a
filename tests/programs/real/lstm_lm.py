#!/usr/bin/env python3
"""Word-level LSTM language model, as PyTorch's examples/word_language_model/main.py trains it:
the corpus batchified into ``--batch-size`` columns, truncated backpropagation through time
(``--bptt`` tokens per batch, ``get_batch(source, i)`` slicing along the sequence), the
hidden state carried from batch to batch and detached (``repackage_hidden``), no optimizer
and no DataLoader: ``model.zero_grad()``, ``backward()``, ``clip_grad_norm_``, then
``p.data.add_(p.grad, alpha=-lr)`` by hand; after each epoch ``evaluate(val_data)`` over the
validation split with the same model under ``torch.no_grad()`` (batch size 10), the lr
divided by 4 when the validation loss did not improve. A synthetic Zipf-distributed corpus
instead of Wikitext-2 (no download).

Its own timer: ``time.perf_counter()`` per training batch, from the end of the previous one
to the end of its logging (each epoch's clock restarts after the validation); the example's
``ms/batch`` line every ``--log-interval`` batches.

    python lstm_lm.py                                    # 2-layer 650-unit LSTM, cuda
    python lstm_lm.py --device cpu --emsize 64 --nhid 64 --ntokens 1000 --train-tokens 4000 --epochs 2
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def synthetic_corpus(ntokens, length, seed):
    # Zipf-like word frequencies, as a real vocabulary's
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, ntokens + 1)
    return torch.from_numpy(rng.choice(ntokens, size=length, p=p / p.sum())).long()


def batchify(data, bsz, device):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main():
    parser = argparse.ArgumentParser(description="PyTorch LSTM Language Model (synthetic corpus)")
    parser.add_argument("--emsize", type=int, default=650)
    parser.add_argument("--nhid", type=int, default=650)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--ntokens", type=int, default=33278, help="vocabulary size (Wikitext-2's)")
    parser.add_argument("--train-tokens", type=int, default=400_000)
    parser.add_argument("--val-tokens", type=int, default=40_000)
    parser.add_argument("--lr", type=float, default=20)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--log-interval", type=int, default=200)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    torch.manual_seed(1111)
    device = torch.device(args.device)
    eval_batch_size = 10
    train_data = batchify(synthetic_corpus(args.ntokens, args.train_tokens, 0), args.batch_size, device)
    val_data = batchify(synthetic_corpus(args.ntokens, args.val_tokens, 1), eval_batch_size, device)

    model = RNNModel(args.ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)
    criterion = nn.NLLLoss()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def get_batch(source, i):
        seq_len = min(args.bptt, len(source) - 1 - i)
        data = source[i:i + seq_len]
        target = source[i + 1:i + 1 + seq_len].view(-1)
        return data, target

    def evaluate(data_source):
        # Turn on evaluation mode which disables dropout.
        model.eval()
        total_loss = 0.
        hidden = model.init_hidden(eval_batch_size)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    ms_each, val_batches = [], 0
    lr = args.lr

    def train(epoch):
        # Turn on training mode which enables dropout.
        model.train()
        total_loss = 0.
        start_time = time.perf_counter()
        hidden = model.init_hidden(args.batch_size)
        sync()
        end = time.perf_counter()
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i)
            # Starting each batch, we detach the hidden state from how it was previously produced.
            # If we didn't, the model would try backpropagating all the way to start of the dataset.
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()

            # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)

            total_loss += loss.item()

            if batch % args.log_interval == 0 and batch > 0:
                cur_loss = total_loss / args.log_interval
                elapsed = time.perf_counter() - start_time
                print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | "
                      "loss {:5.2f} | ppl {:8.2f}".format(epoch, batch, len(train_data) // args.bptt, lr,
                                                          elapsed * 1000 / args.log_interval, cur_loss, math.exp(cur_loss)))
                total_loss = 0
                start_time = time.perf_counter()
            sync()
            now = time.perf_counter()
            ms_each.append((now - end) * 1e3)
            end = now

    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.perf_counter()
        train(epoch)
        val_loss = evaluate(val_data)
        val_batches += len(range(0, val_data.size(0) - 1, args.bptt))
        print("-" * 89)
        print("| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | valid ppl {:8.2f}".format(
            epoch, (time.perf_counter() - epoch_start_time), val_loss, math.exp(val_loss)))
        print("-" * 89)
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen in the validation dataset.
            lr /= 4.0

    per_epoch = len(ms_each) // args.epochs
    # each epoch's first batch (the clock started before its init_hidden) left out
    timed = [ms for k, ms in enumerate(ms_each) if k % per_epoch != 0]
    ms_per_batch = sum(timed) / len(timed)
    print(f"Train: {ms_per_batch:.2f} ms/batch over {len(ms_each)} batches, "
          f"{args.batch_size * args.bptt / ms_per_batch * 1e3:.0f} tokens/s")
    print("RESULT " + json.dumps({"program": "lstm_lm", "step": "training batch (one BPTT segment)",
                                  "ms_per_step": round(ms_per_batch, 4), "ms_per_batch": round(ms_per_batch, 4),
                                  "tokens_per_s": round(args.batch_size * args.bptt / ms_per_batch * 1e3, 1),
                                  "batches": len(ms_each), "batches_per_epoch": per_epoch, "val_batches": val_batches,
                                  "epochs": args.epochs, "ms_each": [round(m, 4) for m in ms_each],
                                  "device": str(device)}))


if __name__ == "__main__":
    main()
