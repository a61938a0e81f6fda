#!/usr/bin/env bash
# quantize-oracle.sh - compare `muse quantize` with llama-quantize on the cases of
# tests/quantize/data/oracle.tsv, and (with --write) store llama-quantize's answers there.
#
#   LLAMA_QUANTIZE=/path/to/llama-quantize bash scripts/quantize-oracle.sh [--write] [--keep DIR]
#
# Needs a llama-quantize binary that is already built (this script never builds llama.cpp; the
# oracle used for the stored answers is named in oracle.tsv). For each input line it writes the
# `muse synth` file; for each case it runs
#     llama-quantize OPTIONS IN LLAMA_OUT TYPE 1     and     muse quantize IN MUSE_OUT TYPE OPTIONS -t 1
# and compares the two files byte for byte. --write replaces the sha256 columns of oracle.tsv with
# the synthesized inputs' and llama-quantize's outputs' hashes. Exit status 1 on any difference.
set -uo pipefail
cd "$(dirname "$0")/.."
MUSE="${MUSE:-$PWD/build/muse}"
LQ="${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE to a llama-quantize binary}"
TSV=tests/quantize/data/oracle.tsv
write=0; keep=""
while [ $# -gt 0 ]; do
    case "$1" in
    --write) write=1 ;;
    --keep) keep="$2"; shift ;;
    *) echo "usage: $0 [--write] [--keep DIR]" >&2; exit 2 ;;
    esac
    shift
done
dir="${keep:-$(mktemp -d)}"; mkdir -p "$dir"
[ -z "$keep" ] && trap 'rm -rf "$dir"' EXIT

declare -A path_muse path_llama sha_of
bad=0; n=0
out_tsv="$dir/oracle.tsv"; : >"$out_tsv"
while IFS= read -r line; do
    if [[ "$line" == \#* || -z "$line" ]]; then echo "$line" >>"$out_tsv"; continue; fi
    IFS=$'\t' read -r kind name a b c d <<<"$line"
    if [ "$kind" = input ]; then
        args=()
        for w in $a; do [[ "$w" == @* ]] && w="${path_muse[${w#@}]}"; args+=("$w"); done
        f="$dir/in-$name.gguf"
        "$MUSE" synth "${args[@]}" -o "$f" -q || { echo "synth $name failed"; exit 1; }
        path_muse[$name]="$f"; path_llama[$name]="$f"
        s=$(sha256sum "$f" | cut -d' ' -f1)
        printf 'input\t%s\t%s\t%s\n' "$name" "$a" "$s" >>"$out_tsv"
    else
        input="$a" type="$b" opts="$c"
        optv=(); [ "$opts" != "-" ] && read -ra optv <<<"$opts"
        lo="$dir/llama-$name.gguf" mo="$dir/muse-$name.gguf"
        "$LQ" "${optv[@]}" "${path_llama[$input]}" "$lo" "$type" 1 >"$dir/llama-$name.log" 2>&1 || echo "llama-quantize $name failed (see $dir/llama-$name.log)"
        "$MUSE" quantize "${path_muse[$input]}" "$mo" "$type" "${optv[@]}" -t 1 -q 2>"$dir/muse-$name.log" || echo "muse quantize $name failed: $(cat "$dir/muse-$name.log")"
        path_llama[$name]="$lo"; path_muse[$name]="$mo"
        ls=$(sha256sum "$lo" 2>/dev/null | cut -d' ' -f1); ms=$(sha256sum "$mo" 2>/dev/null | cut -d' ' -f1)
        n=$((n + 1))
        if [ -n "$ls" ] && [ "$ls" = "$ms" ]; then echo "same   $name"; else echo "DIFFER $name"; bad=$((bad + 1)); fi
        printf 'case\t%s\t%s\t%s\t%s\t%s\n' "$name" "$input" "$type" "$opts" "${ls:--}" >>"$out_tsv"
    fi
done <"$TSV"
echo "$((n - bad)) of $n cases identical"
[ "$write" = 1 ] && cp "$out_tsv" "$TSV" && echo "wrote $TSV"
[ "$bad" -eq 0 ]
