#!/usr/bin/env bash
# Seeds for fuzz_model: tiny synthetic Muse-Glimmer files (both pattern forms, F32 and Q8_0
# matrices) written by `muse synth`, each well under 1 MB.
set -euo pipefail
out="${1:?usage: seed_model.sh OUTDIR}"
mkdir -p "$out"
muse="${MUSE:-$(cd "$(dirname "$0")/../.." && pwd)/build/muse}"
[ -x "$muse" ] || exit 0
common=(--layers 2 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --ff 64 --vocab 300 --ctx 64 --window 4 -q)
"$muse" synth "${common[@]}" --pattern SF -o "$out/model-f32.gguf" || true
"$muse" synth "${common[@]}" --pattern 2 --pattern-u32 -o "$out/model-u32.gguf" || true
"$muse" synth "${common[@]}" --types '*=q8_0' -o "$out/model-q8_0.gguf" || true
