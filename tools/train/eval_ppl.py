#!/usr/bin/env python3
"""eval_ppl.py - validation perplexity of the trained model in PyTorch, llama-perplexity's method:
the text tokenized once (BOS first), cut into chunks of n_ctx tokens, each chunk's first token
replaced by BOS, the logits of positions n_ctx/2 .. n_ctx-2 score the next token; PPL = exp(mean
NLL), +/- from the standard error of the NLL mean (as llama-perplexity prints it).
With --gguf the weights come from the GGUF file (F16-rounded), else from the checkpoint."""
import argparse
import math

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

import common
from model import MuseGlimmer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt")
    ap.add_argument("--gguf")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = MuseGlimmer(common.HP)
    if a.gguf:
        from check_muse import load_gguf_into
        load_gguf_into(model, a.gguf)
    else:
        model.load_state_dict(torch.load(a.ckpt, map_location="cpu")["model"])
    model.eval()
    tok = Tokenizer.from_file(a.tokenizer)
    ids = [common.BOS] + tok.encode(open(a.text).read()).ids
    n_chunk = len(ids) // a.ctx
    first = a.ctx // 2
    nll = []
    with torch.no_grad():
        for c in range(n_chunk):
            x = list(ids[c * a.ctx:(c + 1) * a.ctx])
            x[0] = common.BOS
            x = torch.tensor([x])
            lp = F.log_softmax(model(x)[0].double(), -1)
            tgt = x[0, first + 1:]
            nll += (-lp[first:-1].gather(1, tgt[:, None])[:, 0]).tolist()
            m = np.mean(nll)
            print(f"[{c + 1}]{math.exp(m):.4f}", end=",", flush=True)
    nll = np.array(nll)
    m = nll.mean()
    se = nll.std() / math.sqrt(len(nll))
    print(f"\nFinal estimate: PPL = {math.exp(m):.4f} +/- {math.exp(m) * se:.5f}  "
          f"({n_chunk} chunks of {a.ctx}, {len(nll)} scored tokens, mean NLL {m:.4f})")


if __name__ == "__main__":
    main()
