#!/usr/bin/env bash
# Reference perplexities of the trained tiny model (models/glimmer-tiny-f16.gguf) from llama.cpp's
# llama-perplexity, for tests/eval/test_trained_ppl.sh: F16, and Q8_0 / Q4_K made by `muse quantize`
# (byte-identical to llama-quantize's), on models/valid.txt with a small context and a few chunks.
# Writes tests/eval/data/trained_ppl.txt (one line per type: TYPE CTX CHUNKS PPL RUNNING-VALUES).
# Not run by the tests; needs a llama.cpp build with muse-glimmer:
#   LLAMA_PERPLEXITY=/path/to/llama-perplexity bench/trained_ppl_ref.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LP=${LLAMA_PERPLEXITY:-/work/oracle/build/bin/llama-perplexity}
MUSE=${MUSE:-build/muse}
CTX=${CTX:-512} CHUNKS=${CHUNKS:-8}
out=tests/eval/data/trained_ppl.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp models/glimmer-tiny-f16.gguf "$tmp/F16.gguf"
for t in Q8_0 Q4_K; do "$MUSE" quantize models/glimmer-tiny-f16.gguf "$tmp/$t.gguf" "$t" -q 2>/dev/null; done
{
    echo "# llama-perplexity ($("$LP" --version 2>&1 | grep -a '^version' | head -1)) on models/valid.txt,"
    echo "# -c $CTX -b $CTX --chunks $CHUNKS -t 1 -fa off; written by bench/trained_ppl_ref.sh"
    for t in F16 Q8_0 Q4_K; do
        # this llama-perplexity build now and then exits (status 0) before its last lines reach
        # the log; run again until the final estimate is there
        for try in 1 2 3 4 5; do
            "$LP" -m "$tmp/$t.gguf" -f models/valid.txt -c "$CTX" -b "$CTX" --chunks "$CHUNKS" -t 1 -fa off \
                >"$tmp/log" 2>&1 || true
            grep -a -q 'Final estimate: PPL = ' "$tmp/log" && break
        done
        ppl=$(grep -a -o 'Final estimate: PPL = [0-9.]*' "$tmp/log" | awk '{print $NF}')
        run=$(grep -a -o '\[[0-9]*\][0-9.]*,' "$tmp/log" | tr -d '\n')
        [ -n "$ppl" ] || { echo "no final estimate from llama-perplexity for $t" >&2; exit 1; }
        echo "$t $CTX $CHUNKS $ppl $run"
    done
} >"$out.new"
mv "$out.new" "$out"
cat "$out"
