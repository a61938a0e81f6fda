#!/usr/bin/env bash
# test_trained_ppl.sh - `muse perplexity` on the trained tiny model (models/glimmer-tiny-f16.gguf)
# against llama-perplexity's figures recorded in tests/eval/data/trained_ppl.txt (written by
# bench/trained_ppl_ref.sh from a llama.cpp build; not run here): F16 as committed, Q8_0 and Q4_K
# made here by `muse quantize` (byte-identical to llama-quantize's, so both engines read the same
# files). The final PPL must be within 0.1 % of llama.cpp's (issue 13's bar; F16 within 1e-4), and
# every running per-chunk value within 0.5 %: on one chunk llama.cpp itself moves by up to 0.26 %
# on Q4_K when only its KV cache type changes (docs/perplexity.md), so the bar on the final value,
# over 8 chunks of 512, is the meaningful one. Real weights make this sensitive: a wrong norm or RoPE moves this PPL by far
# more than 0.1 %, while on random weights the PPL is flat noise around the vocabulary size.
set -uo pipefail
cd "$(dirname "$0")/../.."
MUSE="${MUSE:-$PWD/build/muse}"
ref=tests/eval/data/trained_ppl.txt
model=models/glimmer-tiny-f16.gguf
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail=0; n=0
for t in Q8_0 Q4_K; do
    "$MUSE" quantize "$model" "$dir/$t.gguf" "$t" -q 2>/dev/null || { echo "FAIL muse quantize $t"; exit 1; }
done
while read -r t ctx chunks ppl run; do
    case "$t" in '#'*|'') continue;; esac
    m="$dir/$t.gguf"; [ "$t" = F16 ] && m=$model
    out=$("$MUSE" perplexity -m "$m" -f models/valid.txt -c "$ctx" --chunks "$chunks" -t 1 2>/dev/null)
    n=$((n + 1))
    if ! python3 - "$t" "$ppl" "$run" "$out" <<'PY'
import re, sys
t, ref, ref_run, out = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
if not m:
    print(f"FAIL {t}: no final estimate in muse's output: {out[-200:]!r}"); sys.exit(1)
got = float(m.group(1))
rv = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", ref_run)]
gv = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out)]
rel = abs(got - ref) / ref
worst = max(abs(a - b) / b for a, b in zip(gv, rv)) if len(gv) == len(rv) else float("inf")
bar = 1e-4 if t == "F16" else 1e-3
ok = rel <= bar and worst <= 5e-3 and len(gv) == len(rv)
print(f"{'ok  ' if ok else 'FAIL'} {t}: muse PPL {got:.4f}, llama.cpp {ref:.4f}, rel. diff {rel:.1e} "
      f"(bar {bar:g}); running values {len(gv)}/{len(rv)}, worst rel. diff {worst:.1e}")
sys.exit(0 if ok else 1)
PY
    then fail=$((fail + 1)); fi
done <"$ref"
[ "$n" -eq 3 ] || { echo "FAIL expected 3 reference lines in $ref, got $n"; exit 1; }
echo "trained perplexity: $((n - fail))/$n within the bar"
[ "$fail" -eq 0 ]
