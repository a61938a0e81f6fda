#!/usr/bin/env python3
"""train_drafter.py - distil a DFlash drafter (dflash.md) from the trained tiny Muse-Glimmer.

1. Distillation data: prompts (random windows of train.txt after BOS, and rendered training chats
   ending with the generation prompt) are greedily continued by the target with a KV cache; the
   target's residuals entering the layers DHP["target_layers"] are captured for every forwarded
   position (F16 in memory).
2. Training (the block objective): anchors P inside the generated part; the drafter sees the
   features of positions < P, the block [seq[P], MASK x (b-1)] at positions P..P+b-1, and learns
   rows r = 1..b-1 -> seq[P+r] (the target's own greedy tokens), cross-entropy weighted by
   exp(-(r-1)/gamma). The target's token_embd and output are frozen and borrowed (raw: no
   embedding norm, no logit scale, no softcap).
3. Acceptance on validation prompts: target greedy continuation, then the speculative loop
   simulated exactly (dflash.md section 4.3, greedy): at anchor P the drafter proposes b-1 tokens
   from the features of positions < P; m = the longest prefix equal to the target's greedy
   tokens; m + 1 tokens are emitted (m drafts + the target's bonus/correction); P += m + 1.
   Mean accepted length = tokens emitted per step (the +1 included), as llama.cpp counts
   n_accept + 1 per draft/verify round.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

import common
from model import Drafter, MuseGlimmer
from train_target import encode_stream


def gen_set(model, tok, stream, convs, n_seq, batch, n_gen, rng, np_rng, chat_frac, tl):
    seqs, feats, starts = [], [], []
    t0 = time.time()
    while len(seqs) < n_seq:
        if rng.random() < chat_frac:
            # whole rendered conversations cut to a common length: the continuation runs through
            # the rest of a user turn and the ATEM headers into an assistant reply
            ps = [tok.encode(common.random_chat_text(convs[rng.randrange(len(convs))], rng)).ids
                  for _ in range(batch)]
            L = min(min(len(p) for p in ps), 384)
            ps = [p[:L] for p in ps]
        else:
            L = rng.choice([16, 48, 96, 160])
            ps = []
            for _ in range(batch):
                s = int(np_rng.integers(0, len(stream) - L))
                ps.append([common.BOS] + stream[s:s + L - 1].tolist())
        x = torch.tensor(ps, dtype=torch.long)
        seq, f = model.generate(x, n_gen, capture=tl)
        for i in range(batch):
            seqs.append(seq[i])
            feats.append(f[i].half())
            starts.append(L)
        print(f"  generated {len(seqs)}/{n_seq} ({time.time() - t0:.0f} s)", flush=True)
    return seqs, feats, starts


def batch_blocks(seqs, feats, starts, idx, n_anchor, b, rng):
    """Pad a batch of sequences; anchors P with P >= start and P + b - 1 <= len - 1."""
    T = max(len(feats[i]) for i in idx)
    fb = torch.zeros(len(idx), T, feats[idx[0]].shape[-1])
    Ps, anc, lab = [], [], []
    for j, i in enumerate(idx):
        fb[j, :len(feats[i])] = feats[i].float()
        lo, hi = starts[i], len(seqs[i]) - b
        P = sorted(rng.sample(range(lo, hi + 1), min(n_anchor, hi - lo + 1)))
        while len(P) < n_anchor:
            P.append(P[-1])
        Ps.append(P)
        anc.append([int(seqs[i][p]) for p in P])
        lab.append([[int(seqs[i][p + r]) for r in range(1, b)] for p in P])
    return fb, torch.tensor(anc), torch.tensor(Ps), torch.tensor(lab)


@torch.no_grad()
def acceptance(drafter, seqs, feats, starts, embd, head_w, b):
    """Simulated greedy speculative decoding over each generated continuation. The drafts at an
    anchor P depend only on (features < P, seq[P]), so the drafts of every possible anchor are
    computed in one batched forward, then the loop walks them."""
    steps, emitted = 0, 0
    hist = np.zeros(b + 1, dtype=np.int64)
    for s, f, L in zip(seqs, feats, starts):
        n = len(s)
        Ps = list(range(L, n - b + 1))
        lg = drafter(f[None].float(), s[Ps][None], torch.tensor([Ps]), embd, head_w)
        drafts = lg[0, :, 1:].argmax(-1)  # [n_anchor, b-1]
        P = L
        while P + b - 1 <= n - 1:
            ok = (drafts[P - L] == s[P + 1:P + b]).int()
            m = int(ok.cumprod(0).sum())
            steps += 1
            emitted += m + 1
            hist[m + 1] += 1
            P += m + 1
    return emitted / max(steps, 1), steps, hist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", required=True, help="target checkpoint")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-seq", type=int, default=768)
    ap.add_argument("--n-gen", type=int, default=96)
    ap.add_argument("--gen-batch", type=int, default=64)
    ap.add_argument("--chat", type=float, default=0.25)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--anchors", type=int, default=12)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--n-valid", type=int, default=32)
    ap.add_argument("--valid-gen", type=int, default=128)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = common.seeded_rng(a.seed)
    np_rng = np.random.default_rng(a.seed)
    dhp = common.DHP
    b = dhp["block_size"]
    tl = dhp["target_layers"]
    os.makedirs(a.out, exist_ok=True)

    ck = torch.load(a.target, map_location="cpu")
    target = MuseGlimmer(ck["hp"])
    target.load_state_dict(ck["model"])
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    embd, head_w = target.token_embd.weight, target.output.weight
    tok = Tokenizer.from_file(f"{a.data}/tokenizer.json")
    train_ids = encode_stream(tok, open(f"{a.data}/train.txt").read())
    valid_ids = encode_stream(tok, open(f"{a.data}/valid.txt").read())
    ctrain = [json.loads(l) for l in open(f"{a.data}/chat_train.jsonl")]

    print("distillation set:", flush=True)
    seqs, feats, starts = gen_set(target, tok, train_ids, ctrain, a.n_seq, a.gen_batch, a.n_gen,
                                  rng, np_rng, a.chat, tl)
    print("validation set (valid.txt prompts of 128 tokens, 128 greedy tokens):", flush=True)
    vr = common.seeded_rng(77)
    vnp = np.random.default_rng(77)
    vseqs, vfeats, vstarts = [], [], []
    for _ in range(a.n_valid // 16):
        ps = []
        for _ in range(16):
            s = int(vnp.integers(0, len(valid_ids) - 128))
            ps.append([common.BOS] + valid_ids[s:s + 127].tolist())
        seq, f = target.generate(torch.tensor(ps), a.valid_gen, capture=tl)
        for i in range(16):
            vseqs.append(seq[i]); vfeats.append(f[i].half()); vstarts.append(128)

    drafter = Drafter(ck["hp"]["n_embd"], dhp)
    opt = torch.optim.AdamW(drafter.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    wts = torch.tensor([math.exp(-(r - 1) / a.gamma) for r in range(1, b)])
    wts = wts / wts.sum()
    logf = open(f"{a.out}/drafter_loss.csv", "w")
    logf.write("step,minutes,lr,loss,acc_row1,valid_mean_accepted_length\n")
    t0 = time.time()
    run = None
    for step in range(1, a.steps + 1):
        frac = min(1.0, max(step / a.steps, (time.time() - t0) / 60 / a.minutes))
        lr = a.lr * min(1.0, step / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = [rng.randrange(len(seqs)) for _ in range(a.batch)]
        fb, anc, P, lab = batch_blocks(seqs, feats, starts, idx, a.anchors, b, rng)
        lg = drafter(fb, anc, P, embd, head_w)[:, :, 1:]  # [B, n, b-1, V]
        ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), lab.reshape(-1), reduction="none")
        loss = (ce.view(-1, b - 1) * wts).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        acc1 = (lg[:, :, 0].argmax(-1) == lab[:, :, 0]).float().mean().item()
        run = loss.item() if run is None else 0.9 * run + 0.1 * loss.item()
        mins = (time.time() - t0) / 60
        last = step == a.steps or mins >= a.minutes
        if step % 10 == 0:
            print(f"step {step} loss {run:.4f} acc1 {acc1:.3f} lr {lr:.2e} {mins:.1f} min", flush=True)
        if step % 100 == 0 or last:
            drafter.eval()
            tau, n_steps, hist = acceptance(drafter, vseqs[:8] if not last else vseqs,
                                            vfeats, vstarts, embd, head_w, b)
            drafter.train()
            logf.write(f"{step},{mins:.2f},{lr:.3e},{run:.4f},{acc1:.3f},{tau:.3f}\n")
            logf.flush()
            print(f"== step {step}: mean accepted length {tau:.3f} over {n_steps} steps; hist {hist.tolist()}", flush=True)
            torch.save({"model": drafter.state_dict(), "dhp": dhp, "step": step, "tau": tau, "minutes": mins},
                       f"{a.out}/drafter.pt")
        if last:
            break
    print(f"done: {step} steps, {(time.time() - t0) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
