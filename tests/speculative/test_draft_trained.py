"""test_draft_trained.py - the DFlash drafter on real weights: the trained pair of models/
(glimmer-tiny-f16.gguf and its distilled drafter glimmer-tiny-dflash.gguf).

Greedy speculative decoding is walked through the CLI (bench/trained_acceptance.py's loop, small):
on 3 windows of models/valid.txt (BOS + 63 tokens) the target's 48 greedy tokens are the
reference; at each anchor `muse draft --n-max 7` proposes 7 tokens from the target's captured
features, the longest prefix equal to the target's tokens is accepted, and the anchor moves by
accepted + 1. The mean accepted length (tokens per draft/verify step, the +1 included) must reach
MIN_ACCEPT. A random drafter, or a drafter fed the wrong target layers, the wrong positions or
a broken ring, accepts next to nothing (a random `muse synth --dflash` drafter: 1.000 here);
the trained one measured MEASURED here
(deterministic: greedy, fixed prompts). Also: the ref backend drafts the same tokens as cpu.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MUSE = os.environ.get("MUSE", os.path.join(ROOT, "build", "muse"))
MODEL = os.path.join(ROOT, "models", "glimmer-tiny-f16.gguf")
DRAFT = os.environ.get("MUSE_TRAINED_DRAFT", os.path.join(ROOT, "models", "glimmer-tiny-dflash.gguf"))
MEASURED = 2.953
MIN_ACCEPT = 2.6
fails = 0


def check(desc, cond):
    global fails
    print(("ok   " if cond else "FAIL ") + desc)
    fails += not cond


def muse(*args):
    return subprocess.run([MUSE, *args], capture_output=True, text=True, check=True).stdout


def draft(seq, P, backend="cpu"):
    return json.loads(muse("draft", "-m", MODEL, "--draft-model", DRAFT, "--tokens", ",".join(map(str, seq[:P])),
                           "--anchor", str(seq[P]), "--n-max", "7", "--json", "--top", "1",
                           "--backend", backend))["draft_tokens"]


def main():
    ids = json.loads(muse("tokenize", "-m", MODEL, "--file", os.path.join(ROOT, "models", "valid.txt"),
                          "--json"))["ids"]
    bos, body = ids[0], ids[1:]
    steps_all = emitted_all = 0
    for s in (1000, 30000, 60000):
        prompt = [bos] + body[s:s + 63]
        out = muse("run", "-m", MODEL, "--tokens", ",".join(map(str, prompt)), "--ids", "-n", "48", "--temp", "0")
        seq = prompt + [int(t) for t in out.strip().split(",") if t]
        P, steps, emitted = len(prompt) - 1, 0, 0
        while P + 7 <= len(seq) - 1:
            d = draft(seq, P)
            m = 0
            while m < len(d) and d[m] == seq[P + 1 + m]:
                m += 1
            steps, emitted, P = steps + 1, emitted + m + 1, P + m + 1
        print(f"     prompt at valid token {s}: {emitted / steps:.3f} tokens per step over {steps} steps")
        steps_all += steps
        emitted_all += emitted
        if s == 1000:
            check("ref backend drafts what cpu drafts", draft(seq, len(prompt) + 5, "ref") == draft(seq, len(prompt) + 5))
    tau = emitted_all / steps_all
    check(f"mean accepted length {tau:.3f} >= {MIN_ACCEPT} (measured {MEASURED} when committed)", tau >= MIN_ACCEPT)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
