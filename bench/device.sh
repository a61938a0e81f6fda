#!/usr/bin/env bash
# bench/device.sh - the one script for a session on a real GPU (docs/vulkan.md "On a real GPU").
# Runs on the device tool's bare machine from the repository root, with .dev/bundle.tar.xz
# (bench/device_bundle.sh) carried; without the bundle it uses build/ (a machine that built muse).
# Everything goes to $OUT (default ./device-out): log.txt (progress and every command's output)
# and device.json (the results), written as it goes, so a run stopped at its limit still returns
# what it measured. Steps, each bounded by `timeout`:
#   1. probe: nvidia-smi, `vulkaninfo --summary`, `muse info --devices`; no Vulkan device -> stop
#   2. read bandwidth of the device (PyTorch, when the machine has it): the roofline's denominator
#   3. the op tests (every op and type on the plain path and each fast variant the device has),
#      the model tests (every type's greedy tokens against the cpu, replays, -ngl) and the trained
#      model's 16 greedy tokens, cpu vs vulkan plain vs vulkan auto
#   4. pp512 / tg128 (muse bench --backend vulkan) on 30B-dimension synthetic files (`muse synth
#      --preset 30b --layers $BENCH_LAYERS`, IQ2_XXS and Q4_K FFN/attention, Q4_K embedding, Q6_K
#      head), variant auto (and plain for Q4_K); tg128 over 8 sequences (-np 8)
#   5. MUSE_VK_PROFILE=1 runs (GPU time per dispatch); the whole 30B preset (52 layers, IQ2_XXS
#      FFN: ~9 GiB, written in the background): pp512 / tg128, a decode profile, tg over 8 sequences
#   6. a reference's llama-bench (bundle extra/, -ngl 99) on the same files, when carried
# Usage (device tool): bash bench/device.sh
# A dry run on any Vulkan device (lavapipe): BENCH_PRESET=small BENCH_LAYERS=2 bash bench/device.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
LAYERS="${BENCH_LAYERS:-8}"
DIR="${BENCH_DIR:-/tmp/muse-device}"
mkdir -p "$DIR"
log() { echo "== $(date +%T) $*" | tee -a "$LOG" >&2; }
J="$OUT/device.json"
echo "{" > "$J"
jadd() { # KEY FILE-or-text: one JSON string field
    python3 -c 'import json,sys; print(json.dumps(sys.argv[1]) + ": " + json.dumps(sys.stdin.read()) + ",")' "$1" >> "$J"
}
step() { # NAME TIMEOUT CMD...: run, log, and record its output and status
    local name="$1" t="$2"; shift 2
    log "$name"
    local s=$(date +%s.%N)
    timeout "$t" "$@" > "$OUT/.step" 2>&1; local rc=$?
    local e=$(date +%s.%N)
    cat "$OUT/.step" >> "$LOG"
    printf '%s\n[rc %d, %.1f s]\n' "$(cat "$OUT/.step")" "$rc" "$(awk "BEGIN {print $e - $s}")" | jadd "$name"
    echo "   rc $rc" | tee -a "$LOG" >&2
}

# the bundle: programs, their libraries, the Vulkan loader
if [ -f .dev/bundle.tar.xz ]; then
    B=/tmp/muse-bundle
    mkdir -p "$B" && tar -C "$B" -xJf .dev/bundle.tar.xz
    if ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then # no loader: the bundle's (a bare machine)
        for f in "$B"/debs/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    MUSE="$B/bin/muse" OPS="$B/bin/test_vulkan_ops" MODELS="$B/bin/test_vulkan_models"
    export PATH="$B/bin:$PATH"
else
    MUSE="${MUSE:-build/muse}" OPS=build/tests/vulkan/test_vulkan_ops MODELS=build/tests/vulkan/test_vulkan_models
fi
# NVIDIA's driver may keep its Vulkan ICD outside the loader's search path (a container's mount)
if ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
    icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -1)
    [ -n "$icd" ] && export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"
fi

step nvidia_smi 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
step vulkaninfo 20 vulkaninfo --summary
step devices 30 "$MUSE" info --devices
if ! grep -q '^vulkan [0-9]' "$OUT/.step"; then
    log "no Vulkan device: stop"
    echo '"error": "no Vulkan device"}' >> "$J"
    exit 1
fi
step bandwidth 60 python3 -c '
import torch, time
x = torch.empty(1 << 30, dtype=torch.float32, device="cuda").fill_(1.0)  # 4 GiB
y = torch.empty_like(x)
for f, name, mult in ((lambda: x.sum(), "read (sum)", 1), (lambda: y.copy_(x), "copy (read+write)", 2)):
    f(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10): f()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / 10
    print("%s: %.0f GB/s" % (name, mult * x.numel() * 4 / dt / 1e9))
'
step op_tests 150 "$OPS"
# the whole 30B (the preset's own mix: IQ2_XXS FFN), written in the background while the rest runs
F30="$DIR/muse-30b-full.gguf"
if [ "${BENCH_FULL:-1}" = 1 ] && [ -z "${BENCH_PRESET:-}" ] && [ ! -f "$F30" ]; then
    (timeout 400 "$MUSE" synth --preset 30b -o "$F30" > "$OUT/synth-full.txt" 2>&1) &
    full_pid=$!
fi
# the synthetic 30B-dimension files (both at once: the machine has the cores)
pids=()
for t in iq2_xxs q4_k; do
    f="$DIR/muse-${BENCH_PRESET:-30b}-$LAYERS-$t.gguf"
    [ -f "$f" ] || timeout 300 "$MUSE" synth --preset "${BENCH_PRESET:-30b}" --layers "$LAYERS" \
        --types "ffn_*=$t,attn_*=q4_k,token_embd=q4_k,output=q6_k" -o "$f" > "$OUT/synth-$t.txt" 2>&1 &
    pids+=($!)
done
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
log "synth: $(ls -la "$DIR" | tail -n +2 | awk '{print $5, $9}' | tr '\n' ' ')"
P="${BENCH_PRESET:-30b}"; FI="$DIR/muse-$P-$LAYERS-iq2_xxs.gguf" FQ="$DIR/muse-$P-$LAYERS-q4_k.gguf"

bench() { # NAME FILE ENV... -- ARGS...
    local name="$1" f="$2"; shift 2
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    step "$name" 240 env "${envs[@]}" "$MUSE" bench -m "$f" --backend vulkan "$@"
}
bench profile_q4_k_auto "$FQ" MUSE_VK_VARIANT=auto MUSE_VK_PROFILE=1 -- -p 512 -n 32 -r 1 --no-warmup
bench bench_q4_k_auto "$FQ" MUSE_VK_VARIANT=auto -- -p 512 -n 128 -r 2
bench profile_iq2_xxs_auto "$FI" MUSE_VK_VARIANT=auto MUSE_VK_PROFILE=1 -- -p 512 -n 32 -r 1 --no-warmup
bench bench_iq2_xxs_auto "$FI" MUSE_VK_VARIANT=auto -- -p 512 -n 128 -r 2
bench bench_q4_k_plain "$FQ" MUSE_VK_VARIANT=plain -- -p 512 -n 128 -r 2
bench bench_q4_k_np8 "$FQ" MUSE_VK_VARIANT=auto -- -p 0 -n 32 -np 8 -r 2
if [ -n "${B:-}" ] && [ -x "$B/extra/llama-bench" ]; then
    for f in "$FI" "$FQ"; do
        step "llama_vulkan_$(basename "$f" .gguf)" 240 "$B/extra/llama-bench" -m "$f" -ngl 99 -p 512 -n 128 -r 3
    done
fi
if [ -n "${full_pid:-}" ]; then
    log "waiting for the full 30B file"
    wait "$full_pid"
    if [ -f "$F30" ]; then
        bench bench_30b_full "$F30" MUSE_VK_VARIANT=auto -- -p 512 -n 128 -r 2
        bench profile_30b_full "$F30" MUSE_VK_VARIANT=auto MUSE_VK_PROFILE=1 -- -p 0 -n 32 -r 1 --no-warmup
        bench bench_30b_full_np8 "$F30" MUSE_VK_VARIANT=auto -- -p 0 -n 32 -np 8 -r 2
    fi
fi
step model_tests 200 "$MODELS"
tm=models/glimmer-tiny-f16.gguf
if [ -f "$tm" ]; then
    step trained_greedy 90 bash -c "for b in 'cpu' 'vulkan plain' 'vulkan auto'; do set -- \$b; \
        echo \"\$b: \$(MUSE_VK_VARIANT=\${2:-plain} '$MUSE' run -m $tm --backend \$1 -p 'Once upon a time' -n 16 --temp 0 2>/dev/null | tr '\n' ' ')\"; done"
fi

echo '"done": true}' >> "$J"
log "done"
