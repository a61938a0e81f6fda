#!/usr/bin/env python3
"""trained_acceptance.py - mean accepted length of a DFlash drafter on the trained tiny model,
measured with muse itself (greedy speculative decoding simulated through the CLI).

    python3 bench/trained_acceptance.py [--draft-model models/glimmer-tiny-dflash.gguf]
                                        [--prompts 16] [--n-gen 128] [--n-max 7]

Prompts: `--prompts` windows of models/valid.txt (BOS + 127 tokens, evenly spaced over the
validation split). For each, the target's greedy continuation (`muse run --tokens --ids --temp 0`; it
may stop early at an end-of-text token) is the reference; then the loop of dflash.md section 4.3 is walked: at anchor P
(the last committed token) `muse draft` proposes n_max tokens from the target's features of the
positions before P; m = the longest prefix equal to the target's greedy tokens; m + 1 tokens are
committed (the drafts and the target's own token); P += m + 1. Mean accepted length = committed
tokens per draft/verify step, the +1 included (as llama.cpp's n_accept + 1 per round). Greedy
verification commits exactly the target's greedy tokens, so this is what a speculative loop
would accept. Prints one line per prompt and the total; with --llama-spec also llama.cpp's own
speculative loop on the same prompts (n_accept + 1 per round). Not run by the tests.
"""
import argparse
import json
import os
import re
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--muse", default=os.path.join(ROOT, "build", "muse"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "glimmer-tiny-f16.gguf"))
    ap.add_argument("--draft-model", default=os.path.join(ROOT, "models", "glimmer-tiny-dflash.gguf"))
    ap.add_argument("--text", default=os.path.join(ROOT, "models", "valid.txt"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--llama-spec", help="also run this llama-speculative-simple on the same prompts "
                    "(as text: the window detokenized) and report its n_accept per round")
    a = ap.parse_args()

    def muse(*args):
        return subprocess.run([a.muse, *args], capture_output=True, text=True, check=True).stdout

    ids = json.loads(muse("tokenize", "-m", a.model, "--file", a.text, "--json"))["ids"]
    bos, body = ids[0], ids[1:]
    span = len(body) - a.prompt_len
    steps_all = emitted_all = 0
    hist = [0] * (a.n_max + 2)
    l_rounds = l_acc = 0
    for i in range(a.prompts):
        s = span * i // a.prompts
        prompt = [bos] + body[s:s + a.prompt_len - 1]
        out = muse("run", "-m", a.model, "--tokens", ",".join(map(str, prompt)), "--ids", "-n",
                   str(a.n_gen), "--temp", "0")
        seq = prompt + [int(t) for t in out.strip().split(",") if t]
        P, steps, emitted = len(prompt) - 1, 0, 0  # the anchor: the last committed token
        while P + a.n_max <= len(seq) - 1:
            d = json.loads(muse("draft", "-m", a.model, "--draft-model", a.draft_model,
                                "--tokens", ",".join(map(str, seq[:P])), "--anchor", str(seq[P]),
                                "--n-max", str(a.n_max), "--json", "--top", "1"))["draft_tokens"]
            m = 0
            while m < len(d) and d[m] == seq[P + 1 + m]:
                m += 1
            steps += 1
            emitted += m + 1
            hist[m + 1] += 1
            P += m + 1
        line = f"prompt {i} (valid tokens {s}..): {emitted / steps:.3f} over {steps} steps"
        if a.llama_spec:
            text = muse("tokenize", "-m", a.model, "--detokenize", "--ids", ",".join(map(str, prompt[1:])))
            for _ in range(5):  # this llama.cpp build now and then exits before its last log lines
                r = subprocess.run([a.llama_spec, "-m", a.model, "-md", a.draft_model, "--spec-type", "draft-dflash",
                                    "--spec-draft-n-max", str(a.n_max), "-p", text, "-n", str(a.n_gen), "--temp",
                                    "0", "--top-k", "1", "-t", "1"], capture_output=True, text=True)
                got = dict(re.findall(r"(n_drafted|n_accept)\s*=\s*(\d+)", r.stderr + r.stdout))
                if "n_accept" in got:
                    break
            else:
                line += "; llama.cpp: no n_accept in its output"
            if "n_drafted" in got:
                rounds = -(-int(got["n_drafted"]) // a.n_max)  # the last round may draft fewer
                acc = int(got["n_accept"])
                l_rounds += rounds
                l_acc += acc
                line += f"; llama.cpp {(acc + rounds) / max(rounds, 1):.3f} over {rounds} rounds"
        print(line, flush=True)
        steps_all += steps
        emitted_all += emitted
    print(f"mean accepted length {emitted_all / steps_all:.3f} over {steps_all} steps "
          f"({a.prompts} prompts of {a.prompt_len} tokens, {a.n_gen} greedy tokens, n_max {a.n_max}); "
          f"histogram of committed tokens per step {hist}")
    if l_rounds:
        print(f"llama-speculative-simple: {(l_acc + l_rounds) / l_rounds:.3f} tokens per round over {l_rounds} "
              f"rounds (n_accept {l_acc}; its prompts are the windows' text re-tokenized, its loop starts "
              f"after the first sampled token)")


if __name__ == "__main__":
    main()
