#!/usr/bin/env bash
# Seeds for fuzz_drafter: small DFlash drafters (`muse synth --dflash`) for a target of the
# fuzzer's own dimensions (4 layers, width 64, vocabulary 300), F32 / F16 / Q8_0 matrices, blocks
# of 4 and 16, one to three target layers; plus the golden drafter (another width: the check
# against the target). Each well under 1 MB.
set -euo pipefail
out="${1:?usage: seed_drafter.sh OUTDIR}"
mkdir -p "$out"
muse="${MUSE:-$(cd "$(dirname "$0")/../.." && pwd)/build/muse}"
[ -x "$muse" ] || exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$muse" synth --layers 4 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --ff 64 --vocab 300 --ctx 64 --window 4 -q \
    -o "$tmp/target.gguf" || exit 0
"$muse" synth --dflash --target "$tmp/target.gguf" --layers 1 --block-size 4 --window 4 --ff 32 -q -o "$out/drafter-f32.gguf" || true
"$muse" synth --dflash --target "$tmp/target.gguf" --layers 2 --block-size 16 --window 8 --target-layers 0,3 --heads 4 \
    --kv-heads 2 --head-dim 16 --ff 32 --types '*=f16' -q -o "$out/drafter-f16.gguf" || true
"$muse" synth --dflash --target "$tmp/target.gguf" --layers 1 --block-size 8 --target-layers 2 --head-dim 32 --ff 64 \
    --types '*=q8_0' -q -o "$out/drafter-q8_0.gguf" || true
shared="${MUSE_SHARED:-$(cd "$(dirname "$0")/../../.." && pwd)/shared}"
[ -f "$shared/golden/dflash/df-drafter.gguf" ] && head -c 65536 "$shared/golden/dflash/df-drafter.gguf" >"$out/golden-head64k.gguf"
chmod u+w "$out"/* 2>/dev/null || true
