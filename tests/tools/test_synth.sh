#!/usr/bin/env bash
# `muse synth` end to end: presets, custom dimensions and type rules (checked with an independent
# GGUF header reader), determinism, usage errors, and a 30b-preset slice written with bounded RSS.
set -uo pipefail
MUSE="${MUSE:-build/muse}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# An independent reader of the GGUF header (gguf-and-quants.md part 1): prints "name type ne0 ne1"
# per tensor and checks that the file is exactly as long as its last tensor's padded end.
gguf_tensors() {
    python3 - "$1" <<'EOF'
import struct, sys
path = sys.argv[1]
d = open(path, 'rb').read(64 << 20)
size = __import__('os').path.getsize(path)
o = 0
def rd(f):
    global o
    v = struct.unpack_from('<' + f, d, o); o += struct.calcsize('<' + f); return v[0]
def rs():
    global o
    n = rd('Q'); s = d[o:o + n]; o += n; return s.decode('utf-8')
SZ = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
def rv(t):
    if t == 8: return rs()
    if t == 9:
        et = rd('I'); n = rd('Q'); return [rv(et) for _ in range(n)]
    return rd(SZ[t])
assert d[:4] == b'GGUF'; o = 4
assert rd('I') == 3
nt = rd('Q'); nkv = rd('Q')
kv = {}
for _ in range(nkv):
    k = rs(); kv[k] = rv(rd('I'))
# type id -> (block size, bytes per block), gguf-and-quants.md 2.1
L = {0: (1, 4), 1: (1, 2), 8: (32, 34), 12: (256, 144), 14: (256, 210), 16: (256, 66), 20: (32, 18), 30: (1, 2)}
end = 0
for _ in range(nt):
    name = rs(); nd = rd('I'); ne = [rd('Q') for _ in range(nd)] + [1]; ty = rd('I'); off = rd('Q')
    bs, ts = L[ty]
    end = max(end, off + ne[0] // bs * ts * ne[1])
    print(name, ty, ne[0], ne[1] if nd > 1 else 0)
start = (o + 31) // 32 * 32
padded = (start + end + 31) // 32 * 32
assert size in (start + end, padded), (size, start + end)
print('n_vocab', len(kv['tokenizer.ggml.tokens']), 'bos', kv['tokenizer.ggml.bos_token_id'],
      'pre', kv['tokenizer.ggml.pre'], 'layers', kv['muse-glimmer.block_count'])
EOF
}

# presets
for p in tiny small demo; do
    check "$p writes" "$MUSE" synth --preset "$p" -q -o "$tmp/$p.gguf"
    gguf_tensors "$tmp/$p.gguf" > "$tmp/$p.txt" 2>&1
    check "$p parses" grep -q '^n_vocab' "$tmp/$p.txt"
done
check "tiny: 59 tensors" test "$(grep -c '\.weight' "$tmp/tiny.txt")" = 59
check "tiny: all F32" test "$(awk '$1 ~ /weight/ && $2 != 0' "$tmp/tiny.txt" | wc -l)" = 0
check "small: matrices Q8_0, norms F32" test "$(awk '$1 ~ /weight/ && (($4 == 0) != ($2 == 0))' "$tmp/small.txt" | wc -l)" = 0
check "demo: output Q6_K" grep -qx 'output.weight 14 512 8192' "$tmp/demo.txt"
check "demo: ffn_down Q4_K {1536, 512}" grep -qx 'blk.5.ffn_down.weight 12 1536 512' "$tmp/demo.txt"
check "demo: vocab 8192, bos 8180, llama4" grep -qx 'n_vocab 8192 bos 8180 pre llama4 layers 6' "$tmp/demo.txt"

# custom dimensions and type rules
check "custom writes" "$MUSE" synth --layers 3 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 --ff 96 --vocab 500 \
    --ctx 256 --window 4 --pattern SF --types 'ffn_*=f16,attn_output=bf16,*=q8_0' --seed 9 -q -o "$tmp/c.gguf"
gguf_tensors "$tmp/c.gguf" > "$tmp/c.txt" 2>&1
check "custom: attn_q Q8_0 {64, 64}" grep -qx 'blk.2.attn_q.weight 8 64 64' "$tmp/c.txt"
check "custom: attn_k Q8_0 {64, 32}" grep -qx 'blk.2.attn_k.weight 8 64 32' "$tmp/c.txt"
check "custom: attn_output BF16 {64, 64}" grep -qx 'blk.0.attn_output.weight 30 64 64' "$tmp/c.txt"
check "custom: ffn_down F16 {96, 64}" grep -qx 'blk.1.ffn_down.weight 1 96 64' "$tmp/c.txt"
check "custom: ffn_norm F32" grep -qx 'blk.1.ffn_norm.weight 0 64 0' "$tmp/c.txt"
check "custom: q_norm F32 {16}" grep -qx 'blk.1.attn_q_norm.weight 0 16 0' "$tmp/c.txt"
check "custom: 3 layers, vocab 500" grep -qx 'n_vocab 500 bos 488 pre llama4 layers 3' "$tmp/c.txt"
check "custom: 45 tensors" test "$(grep -c '\.weight' "$tmp/c.txt")" = 45

# muse info reads them and derives the hyperparameters llama.cpp would (pattern in both forms)
"$MUSE" info "$tmp/c.gguf" > "$tmp/c.info" 2>&1
check "info: custom file" grep -q 'n_layer 3, n_embd 64, n_ctx_train 256, n_vocab 500' "$tmp/c.info"
check "info: custom pattern SFS" grep -q 'NoPE): SFS$' "$tmp/c.info"
"$MUSE" synth --preset small --layers 7 --pattern 3 --pattern-u32 -q -o "$tmp/u.gguf"
"$MUSE" info "$tmp/u.gguf" > "$tmp/u.info" 2>&1
check "info: u32 pattern 3 -> SSFSSFS" grep -q 'NoPE): SSFSSFS$' "$tmp/u.info"

# determinism
"$MUSE" synth --preset small -q -o "$tmp/s1.gguf"
"$MUSE" synth --preset small --seed 2 -q -o "$tmp/s2.gguf"
check "same seed -> same bytes" cmp -s "$tmp/small.gguf" "$tmp/s1.gguf"
check "other seed -> other bytes" bash -c "! cmp -s '$tmp/small.gguf' '$tmp/s2.gguf'"

# usage errors exit 2 with one line on stderr, and write nothing
usage_err() { "$MUSE" synth "$@" -o "$tmp/bad.gguf" 2>"$tmp/err.txt"; [ $? -eq 2 ] && [ ! -e "$tmp/bad.gguf" ] && [ -s "$tmp/err.txt" ]; }
check "unknown preset" usage_err --preset 70b
check "unknown option" usage_err --bogus
check "unknown type" usage_err --types 'ffn_*=q9_k'
check "heads not a multiple of kv-heads" usage_err --heads 6 --kv-heads 4
check "k-quant on 320-wide rows" usage_err --embd 320 --types '*=q4_k'
check "bad pattern" usage_err --pattern SXF
check "vocab too small" usage_err --vocab 100
check "missing -o" bash -c "'$MUSE' synth --preset tiny 2>/dev/null; [ \$? -eq 2 ]"
check "--help" bash -c "'$MUSE' synth --help | grep -q -- '--types'"

# a slice of the 30b preset: real widths, one layer, a smaller vocabulary (~450 MB); memory must
# stay bounded (streamed), and the progress bar ends at 100%
if [ "${MUSE_SANITIZER:-0}" != 1 ]; then
    /usr/bin/time -f 'maxrss_kb %M' "$MUSE" synth --preset 30b --layers 1 --vocab 32768 -o "$tmp/30b.gguf" 2>"$tmp/30b.err"
    rss=$(awk '/maxrss_kb/ {print $2}' "$tmp/30b.err")
    echo "30b slice: peak RSS ${rss} KB, $(stat -c %s "$tmp/30b.gguf") bytes"
    check "30b slice: peak RSS < 100 MB" test "${rss:-999999}" -lt 102400
    check "30b slice: progress bar reached 100%" grep -q '100.0%' "$tmp/30b.err"
    gguf_tensors "$tmp/30b.gguf" > "$tmp/30b.txt" 2>&1
    check "30b slice: ffn_gate IQ2_XXS {6656, 19968}" grep -qx 'blk.0.ffn_gate.weight 16 6656 19968' "$tmp/30b.txt"
    check "30b slice: attn_k Q4_K {6656, 256}" grep -qx 'blk.0.attn_k.weight 12 6656 256' "$tmp/30b.txt"
    check "30b slice: token_embd Q4_K, output Q6_K" bash -c "grep -qx 'token_embd.weight 12 6656 32768' '$tmp/30b.txt' && grep -qx 'output.weight 14 6656 32768' '$tmp/30b.txt'"
    check "30b slice: 17 tensors" test "$(grep -c '\.weight' "$tmp/30b.txt")" = 17
    rm -f "$tmp/30b.gguf"
fi

echo "$fails failed"
[ "$fails" -eq 0 ]
