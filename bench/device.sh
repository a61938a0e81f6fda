#!/usr/bin/env bash
# bench/device.sh - the one script for a session on a real GPU (docs/vulkan.md "On a real GPU").
# Written without a GPU: its first run on one is its test. Prints JSON on stdout (progress on
# stderr). Steps, each bounded by `timeout` so that the whole fits a 15-minute device budget:
#   1. probe: `vulkaninfo --summary` (10 s) and `muse info --devices`; no Vulkan device -> the JSON
#      says so and the script ends (a headless NVIDIA container may lack its ICD)
#   2. the op tests (build/tests/vulkan/test_vulkan_ops) on the device: every op and type on the
#      plain path and on each fast matmul variant the device reports (f16, dp4a, coopmat); then
#      build/tests/vulkan/test_vulkan_models (shared weights, every type's greedy tokens against the
#      cpu, the Q8_0 cache, replayed decode steps, -ngl)
#   3. pp512 / tg128 (muse bench --backend vulkan, 2 repetitions) on 30B-dimension synthetic files
#      (`muse synth --preset 30b`, IQ2_XXS and Q4_K; written to $BENCH_DIR, default /tmp) with
#      --layers $BENCH_LAYERS (default 8: the full 30B's 48 layers need ~8 / ~17 GB of disk and
#      upload; the per-layer figures scale), with the fast variants the device has (MUSE_VK_VARIANT
#      auto, the default) and, for q4_k, the plain path too (MUSE_VK_VARIANT=plain)
# Usage: bash bench/device.sh > device.json
set -uo pipefail
cd "$(dirname "$0")/.."
MUSE="${MUSE:-build/muse}"
DIR="${BENCH_DIR:-/tmp}"
LAYERS="${BENCH_LAYERS:-8}"
log() { echo "device.sh: $*" >&2; }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }

probe=$(timeout 10 vulkaninfo --summary 2>&1 | head -60)
devices=$("$MUSE" info --devices 2>&1)
echo "{"
echo "\"vulkaninfo\": $(printf '%s' "$probe" | json_str),"
echo "\"devices\": $(printf '%s' "$devices" | json_str),"
if ! grep -q '^vulkan [0-9]' <<<"$devices"; then
    log "no Vulkan device"; echo "\"error\": \"no Vulkan device\"}"; exit 1
fi
log "op tests"
ops=$(timeout 120 build/tests/vulkan/test_vulkan_ops 2>&1); ops_rc=$?
echo "\"op_tests\": {\"rc\": $ops_rc, \"output\": $(printf '%s' "$ops" | json_str)},"
log "model tests"
mdl=$(timeout 180 build/tests/vulkan/test_vulkan_models 2>&1); mdl_rc=$?
echo "\"model_tests\": {\"rc\": $mdl_rc, \"output\": $(printf '%s' "$mdl" | json_str)},"
echo "\"bench\": ["
first=1
for t in iq2_xxs q4_k; do
    f="$DIR/muse-30b-$LAYERS-$t.gguf"
    if [ ! -f "$f" ]; then
        log "synth $f"
        timeout 300 "$MUSE" synth --preset 30b --layers "$LAYERS" --types "*=$t,token_embd=q4_k,output=q6_k" -o "$f" >&2 || { log "synth $t failed"; continue; }
    fi
    vars="auto"
    [ "$t" = q4_k ] && vars="auto plain"
    for var in $vars; do
        log "bench $t ($var)"
        out=$(MUSE_VK_VARIANT=$var timeout 300 "$MUSE" bench -m "$f" --backend vulkan -p 512 -n 128 -r 2 -o json 2>&1); rc=$?
        [ $first -eq 1 ] || echo ","
        first=0
        echo "{\"type\": \"$t\", \"variant\": \"$var\", \"layers\": $LAYERS, \"rc\": $rc, \"output\": $(printf '%s' "$out" | json_str)}"
    done
done
echo "]}"
