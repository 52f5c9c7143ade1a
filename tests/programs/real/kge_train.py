#!/usr/bin/env python3
"""Knowledge-graph embeddings trained as PyKEEN's sLCWA training loop trains them: a
DataLoader over (head, relation, tail) id triples, a corrupted tail per positive (the
basic negative sampler), TransE's margin ranking loss, one optimizer step per batch; and at
the end of every epoch the loop's own ``gc.collect()`` (PyKEEN's
``TrainingLoop._train_epoch``), over what the program keeps alive: the triples factory's
label dicts (``entity_to_id``, ``relation_to_id``) and its labeled triples, ~``--labels``
strings each. The loop's own timer: each batch, and each epoch's end (RESULT's
``epoch_end_ms``: the collection).

    python kge_train.py                       # 5 epochs of 20 batches, 20,000 entities
    python kge_train.py --no-collect          # the same without the epoch-end collection
"""
import argparse
import gc
import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class TransE(torch.nn.Module):
    def __init__(self, entities, relations, dim):
        super().__init__()
        self.entity = torch.nn.Embedding(entities, dim)
        self.relation = torch.nn.Embedding(relations, dim)

    def forward(self, h, r, t):
        return -(self.entity(h) + self.relation(r) - self.entity(t)).norm(p=1, dim=-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batches", type=int, default=20, help="batches in one epoch")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--labels", type=int, default=20_000, help="entities, each a string label in the factory's dicts")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--no-collect", dest="collect", action="store_false", help="no gc.collect() at each epoch's end")
    a = p.parse_args()
    torch.manual_seed(0)
    relations = 20
    # the triples factory: labels <-> ids and the labeled triples, kept alive for the run
    entity_to_id = {f"entity_{i}": i for i in range(a.labels)}
    relation_to_id = {f"relation_{i}": i for i in range(relations)}
    n = a.batches * a.batch_size
    ids = torch.stack([torch.randint(0, a.labels, (n,)), torch.randint(0, relations, (n,)), torch.randint(0, a.labels, (n,))], 1)
    names = list(entity_to_id)
    labeled = [(names[h], f"relation_{r}", names[t]) for h, r, t in ids.tolist()]
    loader = DataLoader(TensorDataset(ids), batch_size=a.batch_size, shuffle=True)
    model = TransE(a.labels, relations, a.dim)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    ms_each, epoch_end_ms = [], []
    for epoch in range(a.epochs):
        for (batch,) in loader:
            t = time.perf_counter()
            h, r, tail = batch.unbind(1)
            corrupted = torch.randint(0, a.labels, tail.shape)  # the basic negative sampler: a new tail
            loss = torch.nn.functional.margin_ranking_loss(model(h, r, tail), model(h, r, corrupted),
                                                           torch.ones(len(batch)), margin=1.0)
            optim.zero_grad()
            loss.backward()
            optim.step()
            ms_each.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        if a.collect:
            gc.collect()  # PyKEEN: at the end of each epoch
        epoch_end_ms.append((time.perf_counter() - t) * 1e3)
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}")
    print("RESULT " + json.dumps({"program": "kge_train", "steps": len(ms_each), "ms_each": ms_each,
                                  "ms_per_step": sum(ms_each) / len(ms_each), "epoch_end_ms": epoch_end_ms,
                                  "objects": len(labeled) + len(entity_to_id)}))


if __name__ == "__main__":
    main()
