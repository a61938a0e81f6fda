#!/usr/bin/env bash
# bench/cpu_30b.sh - the real 30B shape on the CPU (issue 34 item 3): decode tok/s, the time from
# process start to the first generated token (file in the page cache, and dropped from it when the
# box allows), peak RSS; muse against llama.cpp and ik_llama.cpp on the same file, runs alternating.
#   F        the file (default /tmp/muse-30b/30b.gguf; `muse synth --preset 30b` writes it when missing:
#            the UD-IQ2_XXS-like mix, 9.7 GB)
#   T        threads (default: physical cores), R rounds (default 3), N generated tokens per tg run (16)
#   LLAMA    a directory with llama.cpp's llama-bench and llama-completion (optional)
#   IK       a directory with ik_llama.cpp's llama-bench (optional; also run with -rtr 1)
# This script builds nothing: the references are built beside muse (README "Measuring").
# Usage: LLAMA=... IK=... bash bench/cpu_30b.sh   (prints a Markdown table; raw lines on stderr)
set -uo pipefail
cd "$(dirname "$0")/.."
MUSE="${MUSE:-build/muse}"
F="${F:-/tmp/muse-30b/30b.gguf}"
T="${T:-$(lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)}"
R="${R:-3}"
N="${N:-16}"
LLAMA="${LLAMA:-}"
IK="${IK:-}"
log() { echo "cpu_30b: $*" >&2; }
if [ ! -f "$F" ]; then
    mkdir -p "$(dirname "$F")"
    log "synth $F"
    "$MUSE" synth --preset 30b -o "$F" >&2 || exit 1
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2); else print "-"}'; }
tg_muse() { "$MUSE" bench -m "$F" -p 0 -n "$N" -r 1 -t "$T" -o jsonl 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["avg_ts"])'; }
tg_llama() { # BIN [ARGS]: llama-bench's JSON (ik_llama.cpp's has no jsonl)
    local bin="$1"; shift
    "$bin" -m "$F" -p 0 -n "$N" -r 1 -t "$T" -o json "$@" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
declare -A TG
engines=(muse)
[ -n "$LLAMA" ] && engines+=(llama.cpp)
[ -n "$IK" ] && engines+=(ik_llama.cpp "ik_llama.cpp -rtr 1")
for r in $(seq "$R"); do
    for e in "${engines[@]}"; do
        case "$e" in
            muse) v=$(tg_muse) ;;
            llama.cpp) v=$(tg_llama "$LLAMA/llama-bench") ;;
            "ik_llama.cpp") v=$(tg_llama "$IK/llama-bench") ;;
            "ik_llama.cpp -rtr 1") v=$(tg_llama "$IK/llama-bench" -rtr 1) ;;
        esac
        log "round $r $e: tg$N ${v:-failed} t/s"
        TG[$e]="${TG[$e]:-} ${v:-}"
    done
done
# the first token: process start to the end of a 1-token generation, and peak RSS
first() { # ENGINE COLD(0|1): "seconds rss_MiB"
    [ "$2" = 1 ] && { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || return 1; }
    local tf; tf=$(mktemp)
    case "$1" in
        muse) /usr/bin/time -f '%e %M' -o "$tf" "$MUSE" run -m "$F" -p "Hello" -n 1 -t "$T" >/dev/null 2>&1 ;;
        llama.cpp) /usr/bin/time -f '%e %M' -o "$tf" "$LLAMA/llama-completion" -m "$F" -p "Hello" -n 1 -t "$T" -no-cnv \
                       --no-warmup >/dev/null 2>&1 </dev/null ;;
        *) rm -f "$tf"; return 1 ;;
    esac
    awk '{printf "%.2f %.0f\n", $1, $2 / 1024}' "$tf"
    rm -f "$tf"
}
echo "| engine | tg$N t/s (median of $R, $T threads) | first token, warm (s) | first token, cold (s) | peak RSS (MiB) |"
echo "|---|---:|---:|---:|---:|"
for e in "${engines[@]}"; do
    m=$(tr ' ' '\n' <<<"${TG[$e]}" | grep . | median | awk '{printf "%.3f", $1}')
    w=$(first "$e" 0) c=$(first "$e" 1)
    log "$e: tg ${TG[$e]}; warm $w; cold $c"
    [ -n "$w" ] || w="- -"
    [ -n "$c" ] || c="- -"
    echo "| $e | $m | ${w%% *} | ${c%% *} | ${w##* } |"
done
