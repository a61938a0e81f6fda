#!/usr/bin/env bash
# The cpu backend against the ref backend on every case of $MUSE_SHARED/golden/text/cases.json:
# in the exact mode (MUSE_CPU=...,exact: the bit-exact kernel tables) `muse logits` output (every
# prompt position's top-64 logits, the greedy tokens and every greedy step's logits, printed with
# 9 significant digits) must be identical for --backend ref and --backend cpu with 1, 2 and 3
# threads, and, with MUSE_CPU=scalar, for the scalar kernel table. The default (fast) mode,
# whose batched matmuls reassociate (docs/cpu-backend.md, "The tile GEMM"), must give the same
# bits for 1, 2 and 3 threads and pass the llama.cpp golden by the shared comparator (logits
# within the case's tolerance, greedy tokens); so must the exact mode. With --no-repack (flash
# attention, exact matmuls) the greedy tokens follow the golden at least as far as the exact
# mode's do.
set -euo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
GOLDEN="$SHARED/golden/text"
CASES="$GOLDEN/cases.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -f "$CASES" ] || { echo "no $CASES"; exit 1; }

python3 - "$CASES" > "$tmp/list" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(r["case"], r["gguf"], r["prompt"], r.get("kv", "f16"), r["golden"])
PY

# identical: every field but the backend name and the thread count
same() {
    python3 - "$1" "$2" <<'PY'
import json, sys
def load(p):
    d = json.load(open(p))
    for k in ("backend", "n_threads"):
        d.pop(k, None)
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    for k in a:
        if a.get(k) != b.get(k):
            print("  first differing field:", k)
            break
    sys.exit(1)
PY
}

EXACT="${MUSE_CPU:+$MUSE_CPU,}exact"  # keeps a forced level (MUSE_CPU=avx512 -> avx512,exact)
n=0; fail=0
while read -r name gguf prompt kv golden; do
    read -r toks npred < <(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(",".join(map(str,p["tokens"])), p.get("n_predict", 0))' "$GOLDEN/$prompt")
    args=(logits -m "$GOLDEN/$gguf" --tokens "$toks" -n "$npred" --top 64 --kv "$kv")
    "$MUSE" "${args[@]}" --backend ref > "$tmp/$name.ref.json"
    for variant in t1 t2 t3 scalar; do
        n=$((n + 1))
        case $variant in
            scalar) MUSE_CPU=scalar "$MUSE" "${args[@]}" --backend cpu -t 2 > "$tmp/$name.$variant.json" ;;
            *) MUSE_CPU="$EXACT" "$MUSE" "${args[@]}" --backend cpu -t "${variant#t}" > "$tmp/$name.$variant.json" ;;
        esac
        if same "$tmp/$name.ref.json" "$tmp/$name.$variant.json"; then
            echo "$name: cpu exact ($variant) == ref"
        else
            echo "$name: FAIL cpu exact ($variant) differs from ref"; fail=$((fail + 1))
        fi
    done
    n=$((n + 1))
    if ! python3 "$SHARED/tools/compare_golden.py" "$CASES" "$name" "$tmp/$name.t2.json"; then fail=$((fail + 1)); fi
    # the fast mode: thread-count invariant, and within the golden's tolerance
    for t in 1 2 3; do
        "$MUSE" "${args[@]}" --backend cpu -t "$t" > "$tmp/$name.fast$t.json"
    done
    for t in 2 3; do
        n=$((n + 1))
        if same "$tmp/$name.fast1.json" "$tmp/$name.fast$t.json"; then
            echo "$name: cpu fast (t$t) == cpu fast (t1)"
        else
            echo "$name: FAIL cpu fast (t$t) differs from t1"; fail=$((fail + 1))
        fi
    done
    n=$((n + 1))
    echo -n "fast: "
    if ! python3 "$SHARED/tools/compare_golden.py" "$CASES" "$name" "$tmp/$name.fast1.json"; then fail=$((fail + 1)); fi
    # --no-repack: the batched matmuls on the exact kernels (flash attention stays)
    n=$((n + 1))
    "$MUSE" "${args[@]}" --backend cpu -t 2 --no-repack > "$tmp/$name.norepack.json"
    echo -n "no-repack: "
    if ! python3 "$SHARED/tools/compare_golden.py" "$CASES" "$name" "$tmp/$name.norepack.json"; then fail=$((fail + 1)); fi
    # flash attention's probabilities are the reference's (docs/cpu-backend.md): with the matmuls
    # exact, greedy follows the golden at least as far as the exact mode does
    n=$((n + 1))
    if python3 - "$GOLDEN/$golden" "$tmp/$name.t2.json" "$tmp/$name.norepack.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["greedy"]
def agree(path):
    o = json.load(open(path)).get("greedy", [])
    k = 0
    while k < len(g) and k < len(o) and g[k] == o[k]:
        k += 1
    return k
ke, kn = agree(sys.argv[2]), agree(sys.argv[3])
print(f"  greedy as the golden's: exact {ke}/{len(g)}, no-repack {kn}/{len(g)}")
sys.exit(0 if kn >= ke else 1)
PY
    then
        echo "$name: cpu no-repack greedy follows the golden as far as exact"
    else
        echo "$name: FAIL cpu no-repack greedy leaves the golden before the exact mode"; fail=$((fail + 1))
    fi
done < "$tmp/list"

# Synthetic models with the weight types the goldens lack (each through its AVX2 kernel where one
# exists) and every KV cache type: prompt in chunks of 7 through the SWA ring (window 8), then
# greedy steps; cpu with 1, 2, 3 threads == ref.
synth_types=(
    'ffn_gate=iq3_xxs,ffn_up=iq3_s,ffn_down=iq4_xs,attn_q=q5_0,attn_k=iq4_nl,attn_v=q5_0,attn_output=iq4_nl,*=q8_0'
    'ffn_gate=q2_k,ffn_up=q3_k,ffn_down=iq2_xs,attn_q=iq2_s,attn_k=q4_1,attn_v=q5_1,attn_output=q3_k,attn_gate=q4_1,output=q5_1,*=q8_0'
    'ffn_gate=iq1_s,ffn_up=tq2_0,ffn_down=iq1_m,attn_q=tq2_0,attn_output=iq1_m,attn_k=mxfp4,attn_gate=mxfp4,attn_v=tq1_0,*=q8_0'
    'ffn_gate=nvfp4,ffn_up=q1_0,ffn_down=nvfp4,attn_q=q1_0,attn_output=nvfp4,attn_gate=q1_0,*=q8_0'
)
toks=$(seq -s, 5 40)
si=0
for types in "${synth_types[@]}"; do
    si=$((si + 1))
    "$MUSE" synth --preset tiny --types "$types" -q -o "$tmp/synth$si.gguf"
    for kv in f16 f32 q8_0; do
        args=(logits -m "$tmp/synth$si.gguf" --tokens "$toks" -n 6 --top 16 --kv "$kv" -b 7)
        "$MUSE" "${args[@]}" --backend ref > "$tmp/s$si.ref.json"
        for t in 1 2 3; do
            n=$((n + 1))
            MUSE_CPU="$EXACT" "$MUSE" "${args[@]}" --backend cpu -t "$t" > "$tmp/s$si.t$t.json"
            if same "$tmp/s$si.ref.json" "$tmp/s$si.t$t.json"; then
                echo "synth $si ($types) kv $kv: cpu exact (t$t) == ref"
            else
                echo "synth $si ($types) kv $kv: FAIL cpu exact (t$t) differs from ref"; fail=$((fail + 1))
            fi
            # the fast mode: the same bits for any thread count
            "$MUSE" "${args[@]}" --backend cpu -t "$t" > "$tmp/s$si.f$t.json"
            if [ "$t" -gt 1 ]; then
                n=$((n + 1))
                if same "$tmp/s$si.f1.json" "$tmp/s$si.f$t.json"; then
                    echo "synth $si kv $kv: cpu fast (t$t) == cpu fast (t1)"
                else
                    echo "synth $si kv $kv: FAIL cpu fast (t$t) differs from t1"; fail=$((fail + 1))
                fi
            fi
        done
    done
done
echo "cpu backend: $((n - fail))/$n checks pass"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
