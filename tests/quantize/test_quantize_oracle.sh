#!/usr/bin/env bash
# test_quantize_oracle.sh - `muse quantize` writes llama-quantize's bytes: for every case of
# data/oracle.tsv the sha256 of muse's output equals the stored sha256 of llama-quantize's output
# on the same `muse synth` input (F16/F32/BF16 inputs, rows that are not multiples of 256 or 32,
# a DFlash drafter, every TYPE muse writes, --pure, --leave-output-tensor, --tensor-type,
# --output-tensor-type/--token-embedding-type, --allow-requantize). Two cases are repeated with
# 2 and 3 threads: the bytes must not change. If a synthesized input's own sha256 differs from
# the stored one, `muse synth` changed and the expectations must be refreshed with the oracle
# (scripts/quantize-oracle.sh --write): that is reported as a failure, not skipped.
set -uo pipefail
cd "$(dirname "$0")/../.."
MUSE="${MUSE:-$PWD/build/muse}"
TSV=tests/quantize/data/oracle.tsv
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
declare -A path want
fail=0; n=0
check() {  # check NAME FILE WANT
    local got
    got=$(sha256sum "$2" 2>/dev/null | cut -d' ' -f1)
    n=$((n + 1))
    if [ "$got" != "$3" ]; then echo "FAIL $1: sha256 ${got:-<no file>}, llama-quantize $3"; fail=$((fail + 1)); fi
}
while IFS=$'\t' read -r kind name a b c d; do
    case "$kind" in
    input)
        args=()
        for w in $a; do [[ "$w" == @* ]] && w="${path[${w#@}]}"; args+=("$w"); done
        f="$dir/in-$name.gguf"
        "$MUSE" synth "${args[@]}" -o "$f" -q || { echo "FAIL synth $name"; exit 1; }
        path[$name]="$f"
        got=$(sha256sum "$f" | cut -d' ' -f1)
        if [ "$got" != "$b" ]; then
            echo "FAIL input $name: muse synth now writes $got, the expectations were made on $b;"
            echo "     refresh them: LLAMA_QUANTIZE=... bash scripts/quantize-oracle.sh --write"
            fail=$((fail + 1))
        fi ;;
    case)
        input="$a" type="$b" opts="$c"
        optv=(); [ "$opts" != "-" ] && read -ra optv <<<"$opts"
        o="$dir/$name.gguf"
        if ! err=$("$MUSE" quantize "${path[$input]}" "$o" "$type" "${optv[@]}" -t 1 -q 2>&1); then
            echo "FAIL $name: muse quantize failed: $err"; fail=$((fail + 1)); n=$((n + 1)); continue
        fi
        path[$name]="$o"; want[$name]="$d"
        check "$name" "$o" "$d" ;;
    esac
done < <(grep -v '^#' "$TSV")

# threads never change the bytes
for c in f16-q4_k_m:f16:Q4_K_M odd320-q3_k_m:odd320:Q3_K_M; do
    IFS=: read -r name input type <<<"$c"
    for t in 2 3; do
        o="$dir/$name-t$t.gguf"
        "$MUSE" quantize "${path[$input]}" "$o" "$type" -t "$t" -q 2>/dev/null
        check "$name with $t threads" "$o" "${want[$name]}"
    done
done
echo "$((n - fail)) of $n outputs identical to llama-quantize's"
[ "$fail" -eq 0 ] && [ "$n" -ge 50 ]
