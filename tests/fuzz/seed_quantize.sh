#!/usr/bin/env bash
# Seeds for fuzz_quantize: small synthetic F16/F32 files (one with rows not a multiple of 32, one
# DFlash drafter) written by `muse synth`, each under 1 MB. The fuzzer's first byte picks the
# TYPE, so each seed file is stored behind one selector byte.
set -euo pipefail
out="${1:?usage: seed_quantize.sh OUTDIR}"
mkdir -p "$out"
muse="${MUSE:-$(cd "$(dirname "$0")/../.." && pwd)/build/muse}"
[ -x "$muse" ] || exit 0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 2 --embd 256 --heads 2 --kv-heads 1 --head-dim 64 --ff 256 --vocab 300 --ctx 64 --window 4 -q)
"$muse" synth "${common[@]}" --types '*=f16' -o "$tmp/f16.gguf" || true
"$muse" synth "${common[@]}" --types 'ffn_*=bf16' -o "$tmp/f32.gguf" || true
"$muse" synth --layers 2 --embd 200 --heads 4 --kv-heads 2 --head-dim 50 --ff 300 --vocab 300 --ctx 64 -q \
    --types '*=f16' -o "$tmp/odd.gguf" || true
"$muse" synth --dflash --target "$tmp/f16.gguf" --layers 1 --types '*=f16' -q -o "$tmp/df.gguf" || true
i=0
for f in "$tmp"/*.gguf; do
    [ -f "$f" ] || continue
    for sel in 0 1 2 3; do { printf "\\x$(printf %02x $(( (i * 5 + sel * 3) % 128 )))"; cat "$f"; } >"$out/quantize-$(basename "$f" .gguf)-$sel"; done
    i=$((i + 1))
done
