#!/usr/bin/env python3
"""trained_golden_ref.py - llama.cpp's logits and greedy continuations for the trained tiny model.

Writes tests/model/data/trained_golden.json, the golden with real weights that
tests/model/test_trained_golden.py checks muse against. Not run by the tests; needs a llama.cpp
build with muse-glimmer (its `llama-debug` and `llama-simple`):

    LLAMA_BIN=/path/to/llama.cpp/build/bin python3 bench/trained_golden_ref.py

For every prompt text, llama.cpp's greedy continuation is built one token at a time: `llama-debug
--save-logits` evaluates the text (BOS added, as the model's add_bos_token says) and saves the
full logits of its last position and the token ids it evaluated; the argmax (lowest id on a tie)
is the next token, whose text is appended for the next run. Every run's token ids must be the
previous ids plus that token (the text re-tokenizes to the same sequence), else the continuation
stops there. So row k holds llama.cpp's logits at position n_prompt - 1 + k after the prompt and
greedy[0..k-1], i.e. the row that chooses greedy[k]. The continuation is then checked against
`llama-simple -n N` (llama.cpp's own decode loop with a KV cache, greedy) printing the same text.
KV cache F16 (llama.cpp's default), flash attention off, one thread, as the text goldens.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import gguf  # PyPI gguf (the vocabulary, to turn ids back into text)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "glimmer-tiny-f16.gguf")
OUT = os.path.join(ROOT, "tests", "model", "data", "trained_golden.json")
BIN = os.environ.get("LLAMA_BIN", "/work/oracle/build/bin")
N_PREDICT = 24
TOP = 20


def valid_passage(first, last):
    lines = open(os.path.join(ROOT, "models", "valid.txt"), encoding="utf-8").read().split("\n")
    return "\n".join(lines[first - 1:last])


PROMPTS = [
    ("romeo", "ROMEO:"),
    ("hamlet", "To be, or not to be"),
    ("king_henry", "KING HENRY.\nI will"),
    # about 190 tokens of the validation split: the window (128) and the ring are crossed
    ("valid_201", valid_passage(201, 230)),
]


def byte_decoder():
    """GPT-2 byte-level BPE: the printable character standing for each byte, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_bytes():
    r = gguf.GGUFReader(MODEL)
    f = r.fields["tokenizer.ggml.tokens"]
    dec = byte_decoder()
    out = []
    for i in f.data:
        s = bytes(f.parts[i]).decode("utf-8")
        out.append(bytes(dec[ch] for ch in s) if all(ch in dec for ch in s) else s.encode())
    return out


def llama_debug(text, tmp):
    d = os.path.join(tmp, "dbg")
    subprocess.run([f"{BIN}/llama-debug", "-m", MODEL, "-p", text, "--save-logits",
                    "--logits-output-dir", d, "-t", "1", "-fa", "off", "-c", "1024"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = os.path.join(d, "llamacpp-" + os.path.splitext(os.path.basename(MODEL))[0])
    raw = open(base + ".bin", "rb").read()
    logits = struct.unpack(f"<{len(raw) // 4}f", raw)
    traw = open(base + "-tokens.bin", "rb").read()
    toks = list(struct.unpack(f"<{len(traw) // 4}i", traw))
    return toks, logits


def top_list(logits, k):
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:k]
    # 9 significant digits: each value round-trips to the same float32
    return [[i, float(f"{logits[i]:.9g}")] for i in order]


def main():
    vb = vocab_bytes()
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in PROMPTS:
            prompt, logits = llama_debug(text, tmp)
            rows, greedy = [], []
            cont = b""
            while True:
                rows.append({"pos": len(prompt) - 1 + len(greedy), "top": top_list(logits, TOP)})
                nxt = rows[-1]["top"][0][0]
                greedy.append(nxt)
                if len(greedy) == N_PREDICT:
                    break
                cont += vb[nxt]
                try:
                    ctext = cont.decode("utf-8")
                except UnicodeDecodeError:
                    print(f"{name}: stop at {len(greedy)}: the continuation is not whole UTF-8")
                    break
                toks, logits = llama_debug(text + ctext, tmp)
                if toks != prompt + greedy:
                    print(f"{name}: stop at {len(greedy)}: the text re-tokenizes differently")
                    break
            ctext = b"".join(vb[t] for t in greedy).decode("utf-8", "replace")
            # llama.cpp's own decode loop (KV cache, one token per step) must print the same text
            sim = subprocess.run([f"{BIN}/llama-simple", "-m", MODEL, "-n", str(len(greedy)), text],
                                 capture_output=True, check=True).stdout.decode("utf-8", "replace")
            if not sim.rstrip("\n").endswith(ctext.rstrip("\n")) and ctext.rstrip("\n") not in sim:
                sys.exit(f"{name}: llama-simple printed {sim!r}, llama-debug's greedy is {ctext!r}")
            print(f"{name}: {len(prompt)} prompt tokens, {len(greedy)} greedy tokens: {ctext!r}")
            cases.append({"name": name, "text": text, "prompt": prompt, "greedy": greedy, "rows": rows})
    ver = subprocess.run([f"{BIN}/llama-debug", "--version"], capture_output=True).stderr.decode()
    ver = next((l for l in ver.splitlines() if l.startswith("version")), "?")
    doc = {
        "model": "models/glimmer-tiny-f16.gguf",
        "source": f"llama.cpp {ver}: llama-debug --save-logits -t 1 -fa off -c 1024 (F16 KV), "
                  "greedy checked with llama-simple; written by bench/trained_golden_ref.py",
        "kv": "f16",
        # the text goldens' "float" class (shared/golden/text/cases.json, tiny-f32 with an F16 KV)
        "logit_tol_max": 0.04, "logit_tol_rms": 0.0086, "near_tie": 0.047,
        "rows_note": "rows[k] = logits at position len(prompt)-1+k after prompt + greedy[:k]; "
                     "its argmax is greedy[k]; top = the 20 highest [id, logit], ties to the lower id",
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
