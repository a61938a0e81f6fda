#!/usr/bin/env bash
# Long context side by side (issue 33, docs/perf.md "Long context"): prefill of a D-token prompt and
# decode at depth D, muse against llama.cpp's llama-bench on the same file, for each KV cache type,
# with each engine's peak RSS. llama.cpp runs with flash attention off and on (its default is auto);
# the better of the two is the comparison. One round per cell (these runs are long; repeat the
# script for medians).
#   bash bench/long_context.sh LLAMA_BENCH [MODEL] [DEPTHS] [KV TYPES] [THREADS]
#   e.g. bash bench/long_context.sh ~/llama.cpp/build/bin/llama-bench "" "32768 65536 131072" "f16 q8_0 f32" 2
# MODEL defaults to a 4-layer synthetic model with a 131072-token context and the real window
# (2048), made with muse synth if missing.
set -euo pipefail
tmp_err=$(mktemp); trap 'rm -f "$tmp_err"' EXIT
MUSE=${MUSE:-build/muse}
LLAMA=${1:?usage: long_context.sh LLAMA_BENCH [MODEL] [DEPTHS] [KV] [THREADS]}
MODEL=${2:-/tmp/muse-long/m4-128k.gguf}
DEPTHS=${3:-32768 65536 131072}
KVS=${4:-f16 q8_0 f32}
T=${5:-2}
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$MUSE" synth --layers 4 --embd 1024 --heads 8 --kv-heads 2 --head-dim 128 --ff 2048 --ctx 131072 --window 2048 \
        --types '*=q8_0' -o "$MODEL" -q
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $T threads; model $MODEL"
printf '| KV | depth | muse pp512 | llama pp512 (fa) | ratio | muse tg32 | llama tg32 (fa) | ratio | muse RSS | llama RSS |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
ts() { python3 -c "import json,sys; d=[json.loads(l) for l in sys.stdin if l.startswith('{')]; print(' '.join('%.2f' % x['avg_ts'] for x in d))"; }
# a / b, or n/a (llama-bench takes no f32 cache type, nor a quantized V cache without flash attention)
ratio() { python3 -c "import sys; a, b = (float(x or 0) for x in sys.argv[1:]); print(f'{a / b:.2f}x' if a and b else 'n/a')" "$1" "$2"; }
for kv in $KVS; do
    for d in $DEPTHS; do
        m=$( { /usr/bin/time -f "RSS %M" "$MUSE" bench -m "$MODEL" -p 512 -n 32 -d "$d" --kv "$kv" -t "$T" -r 1 -o jsonl; } 2>"$tmp_err" || true)
        mrss=$(grep -o 'RSS [0-9]*' "$tmp_err" | awk '{printf "%.2f GiB", $2/1048576}')
        read -r mpp mtg <<<"$(echo "$m" | ts)"
        best_pp=0; best_tg=0; lrss=""; fa_pp=""; fa_tg=""
        for fa in 0 1; do
            l=$( { /usr/bin/time -f "RSS %M" "$LLAMA" -m "$MODEL" -p 512 -n 32 -d "$d" -ctk "$kv" -ctv "$kv" -fa $fa -t "$T" -r 1 -o jsonl; } 2>"$tmp_err" || true)
            r=$(grep -o 'RSS [0-9]*' "$tmp_err" | awk '{printf "%.2f GiB", $2/1048576}')
            read -r lpp ltg <<<"$(echo "$l" | ts)"
            [ -z "${lpp:-}" ] && continue   # (llama.cpp refuses a quantized V cache without flash attention)
            if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$lpp" "$best_pp"; then best_pp=$lpp; fa_pp=$fa; fi
            if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$ltg" "$best_tg"; then best_tg=$ltg; fa_tg=$fa; lrss=$r; fi
        done
        printf '| %s | %s | %s | %s (%s) | %s | %s | %s (%s) | %s | %s | %s |\n' "$kv" "$d" "$mpp" "$best_pp" "$fa_pp" \
            "$(ratio "$mpp" "$best_pp")" "$mtg" "$best_tg" "$fa_tg" "$(ratio "$mtg" "$best_tg")" "$mrss" "$lrss"
    done
done
