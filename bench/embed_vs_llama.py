#!/usr/bin/env python3
"""embed_vs_llama.py - `muse embed` against llama.cpp's `llama-embedding` on the same file and texts
(issue 33; not part of CI: it needs a llama.cpp build, which this repository does not make).

    python3 bench/embed_vs_llama.py --llama-embedding PATH/llama-embedding --model FILE.gguf

For each pooling (mean, last, cls) both embed the same lines (Euclidean-normalized, as OpenAI
returns them); prints the cosine and the largest absolute difference of each vector. Standard
library only.
"""
import argparse
import json
import math
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[1]
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Once upon a time there was a fox.", "Hello",
         "A much longer sentence about cats, dogs, birds and the weather of the whole week."]


def vectors(cmd):
    for _ in range(5):  # seen: llama-embedding's stdout cut short now and then (its exit): run it again
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        try:
            return [d["embedding"] for d in json.loads(out)["data"]]
        except ValueError as e:
            err = e
    print(f"| {cmd[0]} printed no valid JSON in 5 runs ({err}) |")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-embedding", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--muse", default=str(REPO / "build" / "muse"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    text = "\n".join(TEXTS)
    print(f"model {args.model}, {len(TEXTS)} lines")
    print("| pooling | line | cosine | max abs diff |")
    print("|---|---|---|---|")
    for pool in ("mean", "last", "cls"):
        a = vectors([args.llama_embedding, "-m", args.model, "-p", text, "--pooling", pool, "--embd-normalize", "2",
                     "--embd-output-format", "json", "-t", str(args.threads)])
        b = vectors([args.muse, "embed", "-m", args.model, "-p", text, "--pooling", pool, "-t", str(args.threads)])
        if a is None or b is None:
            continue
        if len(a) != len(b):
            raise SystemExit(f"{pool}: llama-embedding gave {len(a)} vectors, muse {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            dot = sum(p * q for p, q in zip(x, y))
            cos = dot / math.sqrt(sum(p * p for p in x)) / math.sqrt(sum(q * q for q in y))
            print(f"| {pool} | {i} | {cos:.8f} | {max(abs(p - q) for p, q in zip(x, y)):.3g} |")


if __name__ == "__main__":
    main()
