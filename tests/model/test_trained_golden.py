#!/usr/bin/env python3
"""test_trained_golden.py - muse against llama.cpp on the trained tiny model (real weights).

tests/model/data/trained_golden.json (written by bench/trained_golden_ref.py from llama.cpp's
llama-debug / llama-simple; not run here) holds, for 4 English prompts (one of 227 tokens, past the
128-token window), llama.cpp's token ids, its 24-token greedy continuation and the 20 highest
logits of every row that chose a greedy token. `muse logits` runs each prompt (F16 KV, on both
backends, the prompt in one batch and in chunks of 7) and must give:
  - the same prompt token ids (muse tokenizes the text itself with `muse tokenize`),
  - the same greedy tokens (a first difference is allowed only at a decision whose llama.cpp
    top-2 margin is below near_tie; nothing after it is compared),
  - logits by token id over each row's golden top 20 within the text goldens' "float" tolerance
    (max 0.04, RMS 0.0086), rows compared while the fed tokens equal the golden's.
On random weights every engine bug still "generates"; here a wrong norm, RoPE or mask changes
real English into something else, and the logits move by far more than the tolerance.
"""
import json
import math
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MUSE = os.environ.get("MUSE", os.path.join(ROOT, "build", "muse"))
GOLDEN = os.path.join(ROOT, "tests", "model", "data", "trained_golden.json")


def muse_tokens(model, text):
    out = subprocess.run([MUSE, "tokenize", "-m", model, "--text", text, "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip()
    return json.loads(out.stdout)["ids"], ""


def main():
    g = json.load(open(GOLDEN))
    model = os.path.join(ROOT, g["model"])
    tol_max, tol_rms, near_tie = g["logit_tol_max"], g["logit_tol_rms"], g["near_tie"]
    fails = 0
    for c in g["cases"]:
        toks, err = muse_tokens(model, c["text"])
        if toks != c["prompt"]:
            print(f"FAIL {c['name']}: muse tokenize gives {toks} ({err}), llama.cpp {c['prompt']}")
            fails += 1
        n = len(c["greedy"])
        for backend, batch in (("cpu", None), ("cpu", 7), ("ref", None)):
            label = f"{c['name']} ({backend}{', batch ' + str(batch) if batch else ''})"
            args = [MUSE, "logits", "-m", model, "--tokens", ",".join(map(str, c["prompt"])),
                    "-n", str(n), "--top", "64", "--kv", g["kv"], "--backend", backend]
            if batch:
                args += ["--batch", str(batch)]
            p = subprocess.run(args, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"FAIL {label}: muse logits: {p.stderr.strip()}")
                fails += 1
                continue
            o = json.loads(p.stdout)
            mrows = [o["positions"][-1]["top"]] + [s["top"] for s in o.get("greedy_steps", [])]
            mg = [int(t) for t in o["greedy"]]
            # free-running greedy
            k = 0
            while k < min(len(mg), n) and mg[k] == c["greedy"][k]:
                k += 1
            reasons = []
            if k < n:
                gt = c["rows"][k]["top"]
                m = gt[0][1] - gt[1][1]
                if k >= len(mg) or m >= near_tie:
                    reasons.append(f"greedy differs at {k} (llama.cpp margin {m:.3g})")
            # logits by id over the golden top-20, rows while the fed tokens agree (row j is fed
            # greedy[:j], so rows 0..k are comparable)
            diffs = []
            for j in range(min(k + 1, n, len(mrows))):
                e = {int(t): float(v) for t, v in mrows[j]}
                lo = min(e.values())
                for tid, gv in c["rows"][j]["top"]:
                    diffs.append(e[tid] - gv if tid in e else -max(0.0, gv - lo))
            vmax = max(abs(d) for d in diffs)
            vrms = math.sqrt(sum(d * d for d in diffs) / len(diffs))
            if vmax > tol_max:
                reasons.append(f"max {vmax:.4g} > {tol_max}")
            if vrms > tol_rms:
                reasons.append(f"rms {vrms:.4g} > {tol_rms}")
            print(f"{'FAIL' if reasons else 'ok  '} {label}: greedy {k}/{n}, {min(k + 1, n)} rows, "
                  f"max {vmax:.3g} rms {vrms:.3g} {'| ' + '; '.join(reasons) if reasons else ''}")
            fails += bool(reasons)
    print(f"trained golden: {fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
