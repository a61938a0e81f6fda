#!/usr/bin/env bash
# Long prompts side by side (issue 33, docs/perf.md "Long context"): one D-token prompt prefilled
# once, then N tokens decoded greedily at depth D, by `muse run` and by llama.cpp's
# `llama-completion` on the same file and prompt, for each KV cache type: prefill t/s, decode t/s,
# peak RSS of each, and whether the N greedy tokens are the same text. One prefill per cell (the
# llama-bench route, -p 512 -d D, refills the depth for every test and has no f32 cache).
#   bash bench/long_prompt.sh LLAMA_BIN_DIR [MODEL] [DEPTHS] [KV TYPES] [THREADS] [N]
#   e.g. bash bench/long_prompt.sh ~/llama.cpp/build/bin "" "32768 65536 131072" "f16 q8_0 f32" 2 16
# MODEL defaults to a 4-layer synthetic model with a 131072-token context and the real window
# (2048), made with muse synth if missing. llama.cpp runs with flash attention on (its fast path at
# depth, and what a quantized V cache needs; FA=off: its non-flash path, ggml's order, which muse's
# flash attention reproduces). KEEP=DIR keeps each cell's outputs, logs and prompt there. Not part
# of the test suite.
set -euo pipefail
MUSE=${MUSE:-build/muse}
LB=${1:?usage: long_prompt.sh LLAMA_BIN_DIR [MODEL] [DEPTHS] [KV] [THREADS] [N]}
MODEL=${2:-/tmp/muse-long/m4-128k-256.gguf}
DEPTHS=${3:-32768 65536 131072}
KVS=${4:-f16 q8_0 f32}
T=${5:-2}
N=${6:-16}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$MUSE" synth --layers 4 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 512 --ctx 131072 --window 2048 \
        --types '*=q8_0' -o "$MODEL" -q
fi
# a prompt of D tokens: words until the tokenizer counts D (with BOS), the text cut to that
prompt_of() {
    local d=$1 f="$tmp/p$1.txt"
    python3 - "$d" "$f" "$MUSE" "$MODEL" <<'EOF'
import random, subprocess, sys
d, f, muse, model = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
rng = random.Random(d)
words = "the of and a to in is was that for on with as by at from his her they which an be this had not are but were".split()
text = " ".join(rng.choice(words) for _ in range(d + 64))
def count(t):
    open(f, "w").write(t)
    return len(subprocess.run([muse, "tokenize", "-m", model, "--file", f], check=True, capture_output=True, text=True).stdout.split(","))
lo, hi = 0, len(text)  # the longest prefix (at a space) with at most d tokens
while hi - lo > 8:
    mid = (lo + hi) // 2
    if count(text[:mid]) <= d: lo = mid
    else: hi = mid
cut = text.rfind(" ", 0, lo)
open(f, "w").write(text[:cut])
print(count(text[:cut]))
EOF
}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $T threads; model $MODEL; $N tokens decoded"
printf '| KV | prompt tokens | muse prefill t/s | llama prefill t/s | ratio | muse decode t/s | llama decode t/s | ratio | same %s tokens | muse RSS | llama RSS | muse s | llama s |\n' "$N"
printf '|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n'
for d in $DEPTHS; do
    n_prompt=$(prompt_of "$d")
    p="$tmp/p$d.txt" c=$((d + N + 64))
    for kv in $KVS; do
        s=$(date +%s.%N)
        /usr/bin/time -f "RSS %M" "$MUSE" run -m "$MODEL" -f "$p" -n "$N" --temp 0 --ignore-eos --no-display-prompt \
            -c "$c" --kv "$kv" -t "$T" >"$tmp/m.out" 2>"$tmp/m.err" || true
        ms=$(echo "$(date +%s.%N) - $s" | bc)
        s=$(date +%s.%N)
        OMP_WAIT_POLICY=passive /usr/bin/time -f "RSS %M" "$LB/llama-completion" -m "$MODEL" -f "$p" -n "$N" --temp 0 \
            --ignore-eos -no-cnv --no-display-prompt -c "$c" -ctk "$kv" -ctv "$kv" -fa ${FA:-on} -t "$T" \
            >"$tmp/l.out" 2>"$tmp/l.err" </dev/null || true
        ls_=$(echo "$(date +%s.%N) - $s" | bc)
        [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp/m.out" "$KEEP/muse-$kv-$d.out" && cp "$tmp/l.out" "$KEEP/llama-$kv-$d.out" && cp "$tmp/m.err" "$KEEP/muse-$kv-$d.err" && cp "$tmp/l.err" "$KEEP/llama-$kv-$d.err" && cp "$p" "$KEEP/prompt-$d.txt"
        python3 - "$tmp" "$kv" "$n_prompt" "$ms" "$ls_" <<'EOF'
import re, sys
tmp, kv, n_prompt, ms, ls = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
me, le = open(tmp + "/m.err", errors="replace").read(), open(tmp + "/l.err", errors="replace").read()
def rss(e):
    m = re.findall(r"RSS (\d+)", e)
    return f"{int(m[-1]) / 1048576:.2f} GiB" if m else "?"
m = re.search(r"prompt (\d+) tokens in [\d.]+ s \(([\d.]+) tok/s\); generated \d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", me)
mp, mg = (float(m.group(2)), float(m.group(3))) if m else (0, 0)
lp = re.search(r"prompt eval time =.*?\(\s*[\d.]+ ms per token,\s*([\d.]+) tokens per second\)", le)
lg = re.search(r"(?<!prompt )\beval time =.*?\(\s*[\d.]+ ms per token,\s*([\d.]+) tokens per second\)", le)
lp, lg = (float(lp.group(1)) if lp else 0), (float(lg.group(1)) if lg else 0)
lt = re.search(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", le)
same = open(tmp + "/m.out", errors="replace").read().strip() == open(tmp + "/l.out", errors="replace").read().strip()
r = lambda a, b: f"{a / b:.2f}x" if a and b else "n/a"
tokens = n_prompt + ("" if not lt or lt.group(1) == n_prompt else f" (llama {lt.group(1)})")
print(f"| {kv} | {tokens} | {mp:.1f} | {lp:.1f} | {r(mp, lp)} | {mg:.2f} | {lg:.2f} | {r(mg, lg)} | {'yes' if same else 'NO'} | "
      f"{rss(me)} | {rss(le)} | {ms:.0f} | {ls:.0f} |", flush=True)
if not m: print("muse: " + me[-300:].replace("\n", " "), file=sys.stderr)
if not lp: print("llama: " + le[-300:].replace("\n", " "), file=sys.stderr)
EOF
    done
done
