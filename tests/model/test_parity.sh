#!/usr/bin/env bash
# Parity with llama.cpp: every case of $MUSE_SHARED/golden/text/cases.json (held-out cases drop in)
# is run through `muse logits` with the case's KV type and checked by the shared comparator
# (logits by token id within the case's tolerance, argmax and free-running greedy).
#   MUSE_BACKEND   backend to test (default ref)
#   MUSE_BATCH     prompt chunk size passed as --batch (default: the whole prompt in one batch)
#   MUSE_TP        N > 1: run under `mpirun -np N` with --tp N (tests/model/test_tp.sh)
set -euo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
GOLDEN="${MUSE_GOLDEN_DIR:-$SHARED/golden/text}"
CASES="$GOLDEN/cases.json"
BACKEND="${MUSE_BACKEND:-ref}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ -f "$CASES" ] || { echo "no $CASES"; exit 1; }
# one line per case: name gguf prompt kv
python3 - "$CASES" > "$tmp/list" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(r["case"], r["gguf"], r["prompt"], r.get("kv", "f16"))
PY
n=0; fail=0
while read -r name gguf prompt kv; do
    read -r toks npred < <(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(",".join(map(str,p["tokens"])), p.get("n_predict", 0))' "$GOLDEN/$prompt")
    args=(logits -m "$GOLDEN/$gguf" --tokens "$toks" -n "$npred" --top 64 --kv "$kv" --backend "$BACKEND")
    [ -n "${MUSE_BATCH:-}" ] && args+=(--batch "$MUSE_BATCH")
    launch=("$MUSE")
    if [ "${MUSE_TP:-1}" -gt 1 ]; then
        args+=(--tp "$MUSE_TP" --threads 1)
        launch=(mpirun --oversubscribe --bind-to none -np "$MUSE_TP" "$MUSE")
    fi
    n=$((n + 1))
    if ! "${launch[@]}" "${args[@]}" > "$tmp/$name.json" 2> "$tmp/$name.err" < /dev/null; then
        echo "$name: FAIL (muse logits exited with an error)"; cat "$tmp/$name.err"; fail=$((fail + 1)); continue
    fi
    if ! python3 "$SHARED/tools/compare_golden.py" "$CASES" "$name" "$tmp/$name.json"; then fail=$((fail + 1)); fi
done < "$tmp/list"
echo "parity ($BACKEND${MUSE_TP:+, tp $MUSE_TP}): $((n - fail))/$n cases pass"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
