#!/usr/bin/env bash
# The Vulkan device end to end (docs/vulkan.md), on whatever Vulkan device the machine has (CI:
# Mesa's lavapipe, installed by scripts/install-deps.sh --test). Without a Vulkan build or device
# every part FAILS: a CI box that lost the packages must not report the GPU backend as tested.
#   1. every embedded SPIR-V module passes spirv-val (--target-env vulkan1.2)
#   2. no device (VK_ICD_FILENAMES=/nonexistent) and a device number that does not exist
#      (MUSE_VK_DEVICE=99): one line on stderr, exit 1
#      --backend auto picks vulkan on a GPU machine, cpu on lavapipe (a CPU device), and says which;
#      -ngl 2 (part of the trained model's layers on the device) gives the cpu's greedy text, -ngl 0 runs on the cpu
#   3. the text goldens (tests/model/test_parity.sh with MUSE_BACKEND=vulkan): logits within each
#      case's tolerance, greedy tokens by the goldens' near-tie rule
#   4. the trained model (models/glimmer-tiny-f16.gguf): 16 greedy tokens identical to the cpu
#      device's, each of the cpu's top-20 logits within 1e-2 of the vulkan one (F16 weights: the
#      cpu rounds the activations to F16, 2^-11 relative, before every matmul, the GPU keeps them
#      in f32; logits of magnitude ~10 move by ~5e-3; measured 4.1e-3 on lavapipe)
#   4b. the trained model's perplexity within 1e-4 relative of the cpu's; muse bench names the device;
#       MUSE_VK_PROFILE=1 prints the GPU time per dispatch label
#   5. short runs under the Khronos validation layer (MUSE_VK_VALIDATE=1), on the plain path and on
#      each fast matmul variant the device has: no validation error
set -uo pipefail
# the plain matmul (the cpu's numerics); a GPU would otherwise pick its fast variants, whose own
# bounds test_vulkan_ops checks
export MUSE_VK_VARIANT="${MUSE_VK_VARIANT:-plain}"
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
GOLDEN="$SHARED/golden/text"
BUILD="$(dirname "$MUSE")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# 1. spirv-val
n=0
command -v spirv-val >/dev/null || bad "spirv-val is missing (apt-get install spirv-tools)"
for spv in "$BUILD"/gen/spv/*.spv; do
    [ -f "$spv" ] || continue
    n=$((n + 1))
    spirv-val --target-env vulkan1.2 "$spv" || bad "spirv-val: $spv"
done
[ "$n" -gt 0 ] || bad "no SPIR-V modules under $BUILD/gen/spv (was the Vulkan device built? needs libvulkan-dev and glslc)"
echo "spirv-val: $n modules"

# 2. one clear line and exit status 1
one_line() {  # NAME EXPECTED-TEXT CMD...
    local name="$1" want="$2"; shift 2
    timeout 60 "$@" > "$tmp/out" 2> "$tmp/err"; local st=$?
    local lines; lines=$(wc -l < "$tmp/err")
    if [ "$st" -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$want" "$tmp/err"; then
        bad "$name: exit $st, $lines stderr lines (want 1 line with '$want'):"; cat "$tmp/err"
    else
        echo "$name: $(cat "$tmp/err")"
    fi
}
run=("$MUSE" run -m "$GOLDEN/tiny-f32.gguf" -p hi -n 2 --backend vulkan)
one_line "no device" "vulkan:" env VK_ICD_FILENAMES=/nonexistent "${run[@]}"
one_line "device 99" "no device 99" env MUSE_VK_DEVICE=99 "${run[@]}"

# --backend auto: lavapipe is a CPU device, so auto picks cpu and says why (a GPU machine: vulkan)
"$MUSE" run -m "$GOLDEN/tiny-f32.gguf" -p hi -n 2 --backend auto > "$tmp/out" 2> "$tmp/err"; st=$?
want=cpu
"$MUSE" info --devices 2>/dev/null | grep -qE "(discrete|integrated) GPU" && want=vulkan
if [ "$st" -ne 0 ] || ! grep -q "^backend auto: $want" "$tmp/err" || ! grep -q "backend $want" "$tmp/err"; then
    bad "--backend auto (exit $st, want $want):"; cat "$tmp/err"
else
    echo "auto: $(grep '^backend auto' "$tmp/err")"
fi

# -ngl 2 of the trained model's 6 layers on the device, the rest on the cpu: the cpu's greedy text
# (a trained model: its greedy margins are wide, where the synthetic goldens' near ties turn with
# the summation order, golden/text/README.md); -ngl 0: the cpu
g=(-m models/glimmer-tiny-f16.gguf -p "Once upon a time" -n 24 --temp 0 -t 1)
"$MUSE" run "${g[@]}" --backend cpu > "$tmp/ngl.cpu" 2>/dev/null
"$MUSE" run "${g[@]}" --backend vulkan -ngl 2 > "$tmp/ngl.vk" 2> "$tmp/ngl.err"; st=$?
if [ "$st" -ne 0 ] || ! [ -s "$tmp/ngl.cpu" ] || ! cmp -s "$tmp/ngl.cpu" "$tmp/ngl.vk"; then
    bad "-ngl 2 (exit $st): not the cpu's greedy text"; cat "$tmp/ngl.err"
else
    echo "-ngl 2: the cpu's greedy text"
fi
"$MUSE" run "${g[@]}" --backend vulkan -ngl 0 > /dev/null 2> "$tmp/ngl.err"
grep -q "backend cpu" "$tmp/ngl.err" || bad "-ngl 0 did not run on the cpu"

# 3. the goldens
MUSE_BACKEND=vulkan MUSE="$MUSE" MUSE_SHARED="$SHARED" bash tests/model/test_parity.sh || bad "the text goldens on vulkan"

# 4. the trained model against the cpu device
M=models/glimmer-tiny-f16.gguf
toks=$("$MUSE" tokenize -m "$M" --file models/valid.txt --json 2>/dev/null | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["ids"][:48])))')
if [ -z "$toks" ]; then
    bad "cannot tokenize models/valid.txt"
else
    "$MUSE" logits -m "$M" --tokens "$toks" -n 16 --top 40 --backend cpu -t 1 > "$tmp/cpu.json" || bad "cpu logits"
    "$MUSE" logits -m "$M" --tokens "$toks" -n 16 --top 40 --backend vulkan > "$tmp/vk.json" || bad "vulkan logits"
    python3 - "$tmp/cpu.json" "$tmp/vk.json" <<'PY' || bad "the trained model: vulkan vs cpu"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
if a["greedy"] != b["greedy"]:
    sys.exit(f"greedy differs: cpu {a['greedy']} vulkan {b['greedy']}")
rows_a = a["positions"] + a["greedy_steps"]
rows_b = b["positions"] + b["greedy_steps"]
worst = 0.0
for ra, rb in zip(rows_a, rows_b):
    lb = dict((t, v) for t, v in rb["top"])
    for t, v in ra["top"][:20]:
        if t in lb:
            worst = max(worst, abs(v - lb[t]))
        else:
            sys.exit(f"pos {ra['pos']}: cpu top-20 id {t} missing from the vulkan top-40")
print(f"trained model: greedy {len(a['greedy'])}/{len(a['greedy'])} identical, max |logit diff| {worst:.3g} (bound 1e-2)")
sys.exit(0 if worst <= 1e-2 else 1)
PY
fi

# 4b. the trained model's perplexity within 1e-4 relative of the cpu's (the KL-divergence route
#     prints both to 6 decimals), and muse bench names the device
if "$MUSE" perplexity -m "$M" -f models/valid.txt -c 128 --chunks 3 -t 2 --kl-divergence-base "$tmp/base.kld" > /dev/null 2>&1 &&
   timeout 300 "$MUSE" perplexity -m "$M" --kl-divergence --kl-divergence-base "$tmp/base.kld" --backend vulkan > "$tmp/kl" 2>&1 &&
   r=$(python3 - "$tmp/kl" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
q = float(re.search(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", t).group(1))
b = float(re.search(r"Mean PPL\(base\)\s*:\s*([0-9.]+)", t).group(1))
print(f"trained model perplexity: vulkan {q} vs cpu {b} (relative {abs(q / b - 1):.2g}, bound 1e-4)")
sys.exit(0 if abs(q / b - 1) <= 1e-4 else 1)
PY
   ); then echo "$r"; else bad "the trained model's perplexity on vulkan: ${r:-} $(tail -3 "$tmp/kl")"; fi
if out=$(timeout 300 "$MUSE" bench -m "$M" -p 16 -n 4 -r 1 --backend vulkan 2>&1) && grep -q "| vulkan (.*llvmpipe" <<<"$out"; then
    echo "muse bench names the device: $(grep -m1 -o "vulkan (.*) |" <<<"$out")"
else bad "muse bench on vulkan: $(tail -3 <<<"$out")"; fi

# 4c. MUSE_VK_PROFILE=1: a table of GPU time per dispatch label at exit, matmuls with their calls
if out=$(MUSE_VK_PROFILE=1 timeout 120 "$MUSE" bench -m "$M" -p 16 -n 2 -r 1 --backend vulkan 2>&1) &&
   grep -q '^vulkan profile: .* runs, .* ms of GPU time' <<<"$out" &&
   grep -qE '^pp matmul[_a-z0-9]* f16 [0-9]+x[0-9]+ +[1-9][0-9]* ' <<<"$out" &&
   grep -qE '^tg rms_norm +[1-9][0-9]* ' <<<"$out"; then
    echo "profile: $(grep -c -E '^(pp|tg) ' <<<"$out") dispatch labels"
else
    bad "MUSE_VK_PROFILE=1: no profile table: $(head -5 <<<"$out")"
fi

# 5. the validation layer: the plain path, then the fast variants the device has (their features
#    enabled at device creation, their modules and pipelines)
validate() {  # VARIANT MODEL
    MUSE_VK_VARIANT=$1 MUSE_VK_VALIDATE=1 timeout 120 "$MUSE" logits -m "$2" --tokens 1,2,3,4,5,6,7,8 -n 4 --top 5 \
        --backend vulkan > "$tmp/val.out" 2> "$tmp/val.err"; local st=$?
    if [ "$st" -ne 0 ] || grep -qiE "validation error|VUID-" "$tmp/val.out" "$tmp/val.err"; then
        bad "validation layer run, variant $1 (exit $st):"; grep -iE "error|VUID" "$tmp/val.out" "$tmp/val.err" | head -5
    else
        echo "validation layer ($1): no errors"
    fi
}
validate plain "$GOLDEN/small-q4_k.gguf"
devs=$("$MUSE" info --devices 2>/dev/null)
grep -q "fp16 yes" <<<"$devs" && validate f16 "$GOLDEN/small-q4_k.gguf"
grep -q "int8-dot yes" <<<"$devs" && validate dp4a "$GOLDEN/small-q8_0.gguf"
grep -q "int8-dot yes" <<<"$devs" && validate vec "$GOLDEN/small-q4_k.gguf"

echo "vulkan: $fail failure(s)"
[ "$fail" -eq 0 ]
