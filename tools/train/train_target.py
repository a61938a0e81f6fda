#!/usr/bin/env python3
"""train_target.py - train the tiny Muse-Glimmer model on the Shakespeare corpus + chat pairs.

Rows of n_ctx tokens: plain text rows are [BOS] + a random window of the tokenized train.txt;
chat rows (a fraction --chat) pack freshly rendered training conversations (each starting with its
own BOS) into the row. AdamW, linear warmup then cosine decay, a wall-clock budget: the schedule
is laid out for --steps and the run stops early (with the decay compressed) if --minutes would be
exceeded. Writes OUT/ckpt.pt (and ckpt_stepN.pt snapshots), OUT/loss.csv.
"""
import argparse
import csv
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

import common
from model import MuseGlimmer


def encode_stream(tok, text):
    ids = []
    for part in text.split("\n\n"):
        ids += tok.encode(part + "\n\n").ids
    return np.array(ids, dtype=np.int32)


def make_chat_row(tok, convs, rng, T):
    row = []
    while len(row) < T:
        c = convs[rng.randrange(len(convs))]
        row += tok.encode(common.random_chat_text(c, rng)).ids
    return row[:T]


@torch.no_grad()
def evaluate(model, rows):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(rows), 4):
        x = torch.tensor(np.array(rows[i:i + 4]), dtype=torch.long)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        n += x[:, 1:].numel()
    model.train()
    return tot / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512, help="row length during the main phase")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--long-frac", type=float, default=0.15, help="last fraction of steps at n_ctx rows (batch/2)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--chat", type=float, default=0.25)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--bench", action="store_true", help="time 5 steps and exit")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = common.seeded_rng(a.seed)
    np_rng = np.random.default_rng(a.seed)
    tok = Tokenizer.from_file(f"{a.data}/tokenizer.json")
    train_ids = encode_stream(tok, open(f"{a.data}/train.txt").read())
    valid_ids = encode_stream(tok, open(f"{a.data}/valid.txt").read())
    ctrain = [json.loads(l) for l in open(f"{a.data}/chat_train.jsonl")]
    cvalid = [json.loads(l) for l in open(f"{a.data}/chat_valid.jsonl")]
    print(f"train tokens {len(train_ids)}, valid tokens {len(valid_ids)}, chat convs {len(ctrain)}/{len(cvalid)}", flush=True)

    hp = common.HP
    T_ctx = hp["n_ctx"]
    # fixed validation rows: text windows (BOS + 1024 tokens) and packed chat rows
    vtext = [[common.BOS] + valid_ids[s:s + T_ctx].tolist() for s in range(0, len(valid_ids) - T_ctx, T_ctx)]
    vr = common.seeded_rng(999)
    vchat = [[common.BOS] + make_chat_row(tok, cvalid, vr, T_ctx) for _ in range(8)]

    model = MuseGlimmer(hp)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "token_embd" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "token_embd" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params} ({n_params / 1e6:.2f} M)", flush=True)

    os.makedirs(a.out, exist_ok=True)
    logf = open(f"{a.out}/loss.csv", "a")
    log = csv.writer(logf)
    if os.path.getsize(f"{a.out}/loss.csv") == 0:
        log.writerow(["step", "tokens", "minutes", "lr", "train_loss", "valid_text_loss", "valid_chat_loss"])
    warm = a.warmup
    t0 = time.time()
    tokens = 0
    run_loss = None
    step = 0
    while step < a.steps:
        long_phase = max(step / a.steps, (time.time() - t0) / 60 / a.minutes) >= 1 - a.long_frac
        T = T_ctx if long_phase else a.seq
        Bsz = a.batch // 2 if long_phase else a.batch
        rows = []
        for _ in range(Bsz):
            if rng.random() < a.chat:
                rows.append([common.BOS] + make_chat_row(tok, ctrain, rng, T))
            else:
                s = int(np_rng.integers(0, len(train_ids) - T))
                rows.append([common.BOS] + train_ids[s:s + T].tolist())
        x = torch.tensor(np.array(rows), dtype=torch.long)
        # lr: warmup, cosine to 10% over the planned steps
        frac = min(1.0, max(step / a.steps, (time.time() - t0) / 60 / a.minutes))
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += x[:, 1:].numel()
        run_loss = loss.item() if run_loss is None else 0.95 * run_loss + 0.05 * loss.item()
        step += 1
        mins = (time.time() - t0) / 60
        if a.bench and step == 5:
            print(f"5 steps: {mins * 60:.1f} s, {tokens / (mins * 60):.0f} tok/s", flush=True)
            return
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} (avg {run_loss:.4f}) lr {lr:.2e} tok {tokens} {mins:.1f} min", flush=True)
        last = step == a.steps or mins >= a.minutes
        if step % a.eval_every == 0 or last:
            vl = evaluate(model, vtext[:6] if not last else vtext)
            vc = evaluate(model, vchat[:2] if not last else vchat)
            log.writerow([step, tokens, f"{mins:.2f}", f"{lr:.3e}", f"{run_loss:.4f}", f"{vl:.4f}", f"{vc:.4f}"])
            logf.flush()
            print(f"== step {step} valid text {vl:.4f} (ppl {math.exp(vl):.1f}) chat {vc:.4f}", flush=True)
            torch.save({"model": model.state_dict(), "hp": hp, "step": step, "tokens": tokens, "minutes": mins},
                       f"{a.out}/ckpt.pt")
        if mins >= a.minutes:
            print("time budget reached", flush=True)
            break
    print(f"done: {step} steps, {tokens} tokens, {(time.time() - t0) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
