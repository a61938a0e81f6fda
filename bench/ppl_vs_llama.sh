#!/usr/bin/env bash
# Perplexity of muse against llama-perplexity on the same model, text, context and batch:
# prints one markdown row per model (docs/perplexity.md). Not part of the test suite.
#   bench/ppl_vs_llama.sh TEXT CTX BATCH THREADS MODEL.gguf [MODEL.gguf ...]
# Environment: LLAMA_PERPLEXITY (default /work/oracle/build/bin/llama-perplexity), MUSE (build/muse),
#   MUSE_ARGS / LLAMA_ARGS (extra flags for one side, e.g. MUSE_ARGS="--kv f32" LLAMA_ARGS="-ctk f32 -ctv f32").
set -uo pipefail
text=$1 ctx=$2 batch=$3 threads=$4; shift 4
MUSE=${MUSE:-build/muse}
LP=${LLAMA_PERPLEXITY:-/work/oracle/build/bin/llama-perplexity}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
final() { grep -a -o 'Final estimate: PPL = [0-9.]*' "$1" | awk '{print $NF}'; }
chunks() { grep -a -o '\[[0-9]*\][0-9.]*,' "$1" | tail -1 | sed 's/\[\([0-9]*\)\].*/\1/'; }
echo "| model | ctx | batch | chunks | muse PPL | llama.cpp PPL | rel. diff | muse time | llama.cpp time |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in "$@"; do
    s=$(date +%s.%N)
    "$MUSE" perplexity -m "$m" -f "$text" -c "$ctx" -b "$batch" -t "$threads" ${MUSE_ARGS:-} >"$tmp/muse" 2>&1
    tm=$(echo "$(date +%s.%N) - $s" | bc)
    s=$(date +%s.%N)
    "$LP" -m "$m" -f "$text" -c "$ctx" -b "$batch" -t "$threads" -fa off ${LLAMA_ARGS:-} >"$tmp/llama" 2>&1
    tl=$(echo "$(date +%s.%N) - $s" | bc)
    pm=$(final "$tmp/muse") pl=$(final "$tmp/llama")
    if [ -z "$pm" ] || [ -z "$pl" ]; then
        echo "| $(basename "$m") | $ctx | $batch | error: $(tail -n 1 "$tmp/muse" | head -c 80) / $(tail -n 1 "$tmp/llama" | head -c 80) |"
        continue
    fi
    rel=$(python3 -c "print(f'{abs($pm-$pl)/$pl:.1e}')")
    printf '| %s | %s | %s | %s | %s | %s | %s | %.1f s | %.1f s |\n' "$(basename "$m")" "$ctx" "$batch" \
        "$(chunks "$tmp/muse")" "$pm" "$pl" "$rel" "$tm" "$tl"
done
