#!/usr/bin/env bash
# The vision tower at the real Muse-Glimmer dimensions (n_embd 1536, n_ff 8960, 16 heads, patch 14,
# 32x32 windows, adapter 6144 -> 4096 -> 4096 -> 6656, Q8_0), with LAYERS layers (default 4: three
# windowed + one global; the full tower is 50 = 37 + 13, so a 4-layer time x ~12.5 estimates it),
# muse vs llama.cpp's llama-mtmd-cli on the same synthetic files, alternating, REPS times per image.
# muse: `muse image --encode` (encode_ms: the tower + adapter, preprocessing excluded); llama.cpp:
# "mtmd batch encoding done in N ms". llama.cpp needs a text model of width 6656 (a 1-layer
# synthetic one) and a chat template (chatml). Usage:
#   LLAMA_MTMD=/path/to/llama-mtmd-cli bash bench/vision_tower.sh [image ...]
set -uo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
LAYERS="${LAYERS:-4}"; REPS="${REPS:-3}"; THREADS="${THREADS:-2}"
tmp="${TMPDIR:-/tmp}/muse-vision-bench"; mkdir -p "$tmp"
[ -f "$tmp/mm$LAYERS.gguf" ] || "$MUSE" synth --mmproj --preset 30b --layers "$LAYERS" -q -o "$tmp/mm$LAYERS.gguf"
[ -f "$tmp/text6656.gguf" ] || "$MUSE" synth --preset tiny --embd 6656 --heads 4 --kv-heads 1 --head-dim 64 --layers 1 \
    --ff 64 -q -o "$tmp/text6656.gguf"
images=("$@"); [ ${#images[@]} -gt 0 ] || images=("$SHARED/golden/vision/images/img_336x336_gradient.png")
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $THREADS threads, $LAYERS layers"
for img in "${images[@]}"; do
    for r in $(seq "$REPS"); do
        m=$("$MUSE" image --mmproj "$tmp/mm$LAYERS.gguf" --image "$img" --encode -t "$THREADS" --json |
            python3 -c "import json,sys; d=json.load(sys.stdin); print(d['n_tokens'], round(d['encode_ms']))")
        l="-"
        if [ -n "${LLAMA_MTMD:-}" ]; then
            l=$("$LLAMA_MTMD" -m "$tmp/text6656.gguf" --mmproj "$tmp/mm$LAYERS.gguf" --image "$img" -p x -n 1 \
                -t "$THREADS" --temp 0 --chat-template chatml 2>&1 | sed -n 's/.*encoding done in \([0-9]*\) ms.*/\1/p')
        fi
        echo "$(basename "$img") tokens=${m% *} muse_ms=${m#* } llama_ms=$l load=$(cut -d' ' -f1 /proc/loadavg)"
    done
done
