#!/usr/bin/env python3
"""check_tokenizer.py - muse's tokenizer on the exported GGUF vs the Hugging Face tokenizer.

Tokenizes every line of a text file (and the whole file at once) with both and reports the first
difference. Also renders a few chats through `muse template` and compares them with
common.render_chat (the strings the training used)."""
import argparse
import json
import subprocess
import tempfile

from tokenizers import Tokenizer

import common


def muse_ids(muse, gguf, path, special=False):
    cmd = [muse, "tokenize", "-m", gguf, "--file", path, "--no-bos", "--json"] + (["--special"] if special else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--muse", default="build/muse")
    ap.add_argument("--lines", type=int, default=400)
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    text = open(a.text).read()
    whole_hf = tok.encode(text).ids
    whole_mu = muse_ids(a.muse, a.gguf, a.text)
    print(f"whole file: {len(whole_hf)} tokens (HF) vs {len(whole_mu)} (muse): equal = {whole_hf == whole_mu}")
    lines = [l for l in text.split("\n") if l.strip()][: a.lines]
    bad = 0
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        for l in lines:
            f.seek(0); f.truncate(); f.write(l); f.flush()
            if muse_ids(a.muse, a.gguf, f.name) != tok.encode(l).ids:
                bad += 1
                if bad <= 3:
                    print("DIFF:", repr(l))
    print(f"{len(lines)} lines: {len(lines) - bad} equal, {bad} differ")
    # chats: muse template vs render_chat, and special-token parsing
    convs = [["What light through yonder window breaks?", "It is the east, and Juliet is the sun."],
             ["Good morrow.", "Good morrow, cousin.", "Is the day so young?", "But new struck nine."]]
    for turns in convs:
        for reasoning in (None, "I answer as Juliet."):
            msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
            if reasoning:
                msgs[-1]["reasoning_content"] = reasoning
            with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                json.dump({"messages": msgs, "add_generation_prompt": False}, f)
                f.flush()
                out = subprocess.run([a.muse, "template", "--model", a.gguf, "--conversation", f.name,
                                      "--now", "2026-03-04", "--bos", "<|begin_of_text|>"], check=True, capture_output=True, text=True).stdout
            mine = common.render_chat(turns, date="2026-03-04", reasoning=reasoning)
            print(f"chat {len(turns)} turns, reasoning={reasoning is not None}: template equal = {out == mine}")
            if out != mine:
                print(" muse:", repr(out)); print(" mine:", repr(mine))
            with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
                f.write(mine); f.flush()
                mu = muse_ids(a.muse, a.gguf, f.name, special=True)
            print("   ids equal (special parsing):", mu == tok.encode(mine).ids)


if __name__ == "__main__":
    main()
