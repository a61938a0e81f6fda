#!/usr/bin/env python3
"""check_muse.py - compare muse's logits on the exported GGUF with the PyTorch forward.

The PyTorch model gets the SAME weights the GGUF holds (read back from the file, so F16 rounding
is included); muse runs `muse logits --kv f32 --top N_VOCAB` on a token list (validation text or
a rendered chat by default). Prints the max |difference| over all logits of all positions, and
whether the argmax agrees everywhere; also the greedy continuation of both.
"""
import argparse
import json
import subprocess

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer

import common
from model import MuseGlimmer


def load_gguf_into(model, path):
    r = gguf.GGUFReader(path)
    sd = {}
    for t in r.tensors:
        a = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)]) \
            if len(t.shape) > 1 else np.array(t.data, dtype=np.float32)
        sd[t.name] = torch.from_numpy(a.copy())
    m = {"token_embd.weight": "token_embd.weight", "output_norm.weight": "output_norm",
         "output.weight": "output.weight"}
    for il in range(model.hp["n_layer"]):
        for n in ("attn_q", "attn_k", "attn_v", "attn_gate", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            m[f"blk.{il}.{n}.weight"] = f"layers.{il}.{n}.weight"
        for n in ("attn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            m[f"blk.{il}.{n}.weight"] = f"layers.{il}.{n}"
    msd = {m[k]: v for k, v in sd.items()}
    model.load_state_dict(msd, strict=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--muse", default="build/muse")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", default=None, help="text file; the first --n tokens are used")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--kv", default="f32")
    a = ap.parse_args()
    torch.set_num_threads(2)
    tok = Tokenizer.from_file(a.tokenizer)
    if a.text:
        ids = [common.BOS] + tok.encode(open(a.text).read()).ids[: a.n - 1]
    else:
        conv = {"user_speaker": "ROMEO", "assistant_speaker": "JULIET",
                "turns": ["What light through yonder window breaks?", "It is the east."]}
        ids = tok.encode(common.render_chat(conv["turns"], date="2026-03-04")).ids
    model = MuseGlimmer(common.HP)
    load_gguf_into(model, a.gguf)
    model.eval()
    out = subprocess.run([a.muse, "logits", "-m", a.gguf, "--tokens", ",".join(map(str, ids)),
                          "--kv", a.kv, "--top", str(common.N_VOCAB), "-n", str(a.greedy)],
                         check=True, capture_output=True, text=True).stdout
    js = json.loads(out)
    mu = np.zeros((len(ids), common.N_VOCAB), dtype=np.float64)
    for row in js["positions"]:
        for t, v in row["top"]:
            mu[row["pos"], t] = v
    with torch.no_grad():
        pt = model(torch.tensor([ids])).double()[0].numpy()
        seq, _ = model.generate(torch.tensor([ids]), a.greedy, capture=[])
    d = np.abs(mu - pt)
    agree = (mu.argmax(-1) == pt.argmax(-1)).mean()
    print(f"{len(ids)} positions: max |muse - torch| = {d.max():.3e}, mean {d.mean():.3e}, "
          f"argmax agreement {agree * 100:.1f}%")
    g_pt = seq[0, len(ids):].tolist()
    g_mu = js["greedy"]
    print("greedy equal:", g_pt == g_mu)
    print("torch greedy:", repr(tok.decode(g_pt)))
    print("muse  greedy:", repr(tok.decode(g_mu)))


if __name__ == "__main__":
    main()
