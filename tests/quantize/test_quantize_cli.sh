#!/usr/bin/env bash
# test_quantize_cli.sh - `muse quantize` end to end: bad input gives exit status 1, exactly one
# line on stderr naming the problem, and no output file (not a GGUF, a missing file, an
# already-quantized source, an IQ or imatrix-only TYPE, a
# pattern that matches nothing, a bad regex, an override with a float TYPE, a shape without a
# fallback, a type that does not fit a tensor's rows, the same input and output, an unwritable
# output, another architecture); usage errors and values that name nothing (an unknown TYPE or
# ggml type, an override without PATTERN=TYPE) give status 2; --dry-run writes nothing; and
# quantized files load and generate with `muse run` (greedy).
set -uo pipefail
cd "$(dirname "$0")/../.."
MUSE="${MUSE:-$PWD/build/muse}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0; n=0
ok() { n=$((n + 1)); }
bad() { n=$((n + 1)); fail=$((fail + 1)); echo "FAIL $*"; }

"$MUSE" synth --types '*=f16' --seed 1 -o "$dir/f16.gguf" -q || exit 1
"$MUSE" synth --embd 320 --heads 5 --kv-heads 1 --head-dim 64 --ff 864 --layers 2 --vocab 300 --types '*=f16' \
    -o "$dir/odd.gguf" -q || exit 1
"$MUSE" quantize "$dir/f16.gguf" "$dir/q8.gguf" Q8_0 -q 2>/dev/null || exit 1

# expect_error NAME PATTERN ARGS...: status 1 (expect_bad_value: 2), one stderr line containing PATTERN,
# no $dir/out.gguf
want_st=1
expect_bad_value() { want_st=2; expect_error "$@"; want_st=1; }
expect_error() {
    local name="$1" pat="$2"; shift 2
    rm -f "$dir/out.gguf"
    local err st
    err=$("$MUSE" quantize "$@" 2>&1 >/dev/null); st=$?
    local lines; lines=$(printf '%s\n' "$err" | wc -l)
    if [ "$st" -ne "$want_st" ]; then bad "$name: status $st (want $want_st): $err"; return; fi
    if [ "$lines" -ne 1 ]; then bad "$name: $lines stderr lines: $err"; return; fi
    if ! grep -q -- "$pat" <<<"$err"; then bad "$name: '$err' lacks '$pat'"; return; fi
    if [ -e "$dir/out.gguf" ]; then bad "$name: left an output file"; return; fi
    ok
}

printf 'not a gguf file at all\n' >"$dir/text.gguf"
expect_error "not a GGUF" "text.gguf" "$dir/text.gguf" "$dir/out.gguf" Q4_K_M
expect_error "missing file" "nope.gguf" "$dir/nope.gguf" "$dir/out.gguf" Q4_K_M
expect_error "quantized source" "already quantized" "$dir/q8.gguf" "$dir/out.gguf" Q4_K_M
# a value that names nothing is a bad value, as everywhere in the CLI: status 2 (issue 32 item 6)
expect_bad_value "unknown TYPE" "bad value for TYPE: 'Q7_K'" "$dir/f16.gguf" "$dir/out.gguf" Q7_K
expect_error "IQ TYPE" "IQ types: use llama-quantize" "$dir/f16.gguf" "$dir/out.gguf" IQ4_XS
expect_error "imatrix TYPE" "importance matrix" "$dir/f16.gguf" "$dir/out.gguf" Q2_K_S
expect_bad_value "unknown ggml type" "unknown ggml type 'q9_0'" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M --tensor-type attn_v=q9_0
expect_bad_value "unknown output type" "unknown ggml type 'zz'" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M --output-tensor-type zz
expect_error "IQ override" "IQ type" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M --tensor-type attn_v=iq4_nl
expect_error "activation type" "activation format" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M --output-tensor-type q8_K
expect_error "pattern matching nothing" "'attn_zz' matches no quantizable tensor" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M \
    --tensor-type attn_v=q8_0 --tensor-type attn_zz=q8_0
expect_error "pattern on norms only" "matches no quantizable tensor" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M \
    --tensor-type 'attn_norm=q8_0'
expect_bad_value "malformed override" "expected PATTERN=TYPE" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M --tensor-type attn_v
expect_error "bad regex" "bad pattern" "$dir/f16.gguf" "$dir/out.gguf" Q4_K_M --tensor-type '(attn=q8_0'
expect_error "override with a float TYPE" "need a quantized TYPE" "$dir/f16.gguf" "$dir/out.gguf" F16 --tensor-type attn_v=q8_0
expect_error "no fallback" "no fallback type" "$dir/odd.gguf" "$dir/out.gguf" Q1_0
expect_error "type does not fit" "not a multiple of the q4_K block size 256" "$dir/odd.gguf" "$dir/out.gguf" Q4_K_M \
    --token-embedding-type q4_k
expect_error "same file" "same file" "$dir/f16.gguf" "$dir/f16.gguf" Q4_K_M
expect_error "unwritable output" "cannot create" "$dir/f16.gguf" "$dir/no/such/dir/out.gguf" Q4_K_M
"$MUSE" synth --dflash --target "$dir/f16.gguf" --types '*=f16' -o "$dir/df.gguf" -q
python3 - "$dir/df.gguf" "$dir/llama.gguf" <<'EOF'
import sys  # the drafter with its architecture string renamed to "llama" (same length)
b = open(sys.argv[1], 'rb').read()
i = b.index(b'dflash', 24)
open(sys.argv[2], 'wb').write(b[:i] + b'llama!' + b[i + 6:])
EOF
expect_error "other architecture" "architecture 'llama!'" "$dir/llama.gguf" "$dir/out.gguf" Q4_K_M
# non-finite weights: a NaN in the source, and a value whose Q8_0 scale overflows fp16 (llama-quantize
# refuses both: it validates every input and output row)
"$MUSE" synth --seed 2 -o "$dir/f32.gguf" -q
off=$("$MUSE" info "$dir/f32.gguf" | sed -n 's/.*data offset \([0-9]*\).*/\1/p')
python3 - "$dir/f32.gguf" "$off" "$dir/nan.gguf" "$dir/big.gguf" <<'EOF2'
import struct, sys  # token_embd.weight is the first tensor: patch element 300 (row 1)
b = bytearray(open(sys.argv[1], 'rb').read()); o = int(sys.argv[2]) + 4 * 300
for path, v in ((sys.argv[3], struct.pack('<I', 0x7fc00000)), (sys.argv[4], struct.pack('<f', 1e30))):
    c = bytearray(b); c[o:o + 4] = v; open(path, 'wb').write(c)
EOF2
expect_error "NaN weight" "token_embd.weight row 1 has a NaN or infinity" "$dir/nan.gguf" "$dir/out.gguf" Q4_K_M
expect_error "scale overflow" "out of the fp16 range" "$dir/big.gguf" "$dir/out.gguf" Q8_0
expect_error "NaN in a copied tensor" "has a NaN or infinity" "$dir/nan.gguf" "$dir/out.gguf" F32
[ -f "$dir/f16.gguf" ] && ok || bad "the input was touched"

# usage errors: status 2
for args in "" "$dir/f16.gguf" "$dir/f16.gguf $dir/out.gguf" "--bogus $dir/f16.gguf $dir/out.gguf Q4_0"; do
    # shellcheck disable=SC2086
    "$MUSE" quantize $args >/dev/null 2>&1; st=$?
    [ "$st" -eq 2 ] && ok || bad "usage '$args': status $st"
done

# --dry-run writes nothing and lists every tensor
out=$("$MUSE" quantize --dry-run "$dir/f16.gguf" Q4_K_M 2>/dev/null)
[ "$(grep -c '^\[' <<<"$out")" -eq 59 ] && ok || bad "dry run: $(grep -c '^\[' <<<"$out") tensor lines"
grep -q 'blk.3.ffn_down.weight .* f16 -> q6_K' <<<"$out" && ok || bad "dry run: blk.3.ffn_down.weight not q6_K"

# quantized files load and generate (greedy), for a K mix, a legacy type and a fallback mix
for t in Q4_K_M Q5_0 Q2_K; do
    "$MUSE" quantize "$dir/f16.gguf" "$dir/run-$t.gguf" "$t" -q 2>/dev/null || { bad "quantize $t"; continue; }
    if gen=$("$MUSE" run -m "$dir/run-$t.gguf" -p "Hello world" -n 8 2>/dev/null) && [ -n "$gen" ]; then ok
    else bad "muse run on $t"; fi
done
"$MUSE" quantize "$dir/odd.gguf" "$dir/run-odd.gguf" Q3_K_M -q 2>/dev/null && \
    "$MUSE" run -m "$dir/run-odd.gguf" -p "Hello" -n 4 >/dev/null 2>&1 && ok || bad "muse run on a fallback mix"

echo "$((n - fail)) of $n checks passed"
[ "$fail" -eq 0 ]
