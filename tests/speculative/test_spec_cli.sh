#!/usr/bin/env bash
# Speculative decoding through the CLI: `muse run --draft-model D --tokens IDS --ids --max-tokens N`
# prints exactly the plain greedy ids (the golden pair's llama.cpp plain_greedy, and a planted pair
# whose drafts are accepted, on prompts past the windows), sampled runs equal plain ones for a seed,
# MUSE_DRAFT_MODEL works, llama.cpp's spellings are accepted, muse chat's answer is unchanged,
# `muse bench --draft-model` reports both tests with the acceptance fields, and bad input gets one
# clear line.
set -euo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
G="$SHARED/golden/dflash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. the golden pair: llama.cpp's plain greedy tokens, with and without the drafter (F32 KV as recorded)
prompt=$(python3 -c "import json; print(','.join(map(str, json.load(open('$G/dflash_vis.golden.json'))['prompt'])))")
want=$(python3 -c "import json; print(','.join(map(str, json.load(open('$G/dflash_vis.golden.json'))['plain_greedy'])))")
for args in "" "--draft-model $G/df-drafter.gguf" "--draft-model $G/df-drafter.gguf --spec-draft-n-max 7" "-md $G/df-drafter.gguf --spec-draft-n-max 3 --spec-draft-p-min 0 --spec-type draft-dflash" \
            "--draft-model $G/df-drafter.gguf --no-spec-governor --draft-kv f32 --backend ref"; do
    got=$("$MUSE" run -m "$G/df-target-8l-256.gguf" --kv f32 --tokens "$prompt" --ids -n 16 $args 2>/dev/null)
    [ "$got" = "$want" ] || bad "golden pair [$args]: $got != $want"
done
got=$(MUSE_DRAFT_MODEL="$G/df-drafter.gguf" "$MUSE" run -m "$G/df-target-8l-256.gguf" --kv f32 --tokens "$prompt" --ids -n 16 2>"$tmp/env.err")
[ "$got" = "$want" ] || bad "MUSE_DRAFT_MODEL: $got"
grep -q "speculative:" "$tmp/env.err" || bad "MUSE_DRAFT_MODEL: no speculative summary"

# 2. a planted pair (muse synth --cycle / --dflash --copy): drafts accepted, output unchanged
"$MUSE" synth --preset tiny --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --ff 128 --vocab 400 --window 8 --cycle 6 \
    --noise 0.4 -q -o "$tmp/t.gguf"
"$MUSE" synth --dflash --target "$tmp/t.gguf" --block-size 8 --window 32 --head-dim 64 --heads 2 --kv-heads 1 --copy \
    -q -o "$tmp/d.gguf"
ids() { python3 -c "import random; r=random.Random($1); print(','.join(str(r.randrange(380)) for _ in range($2)))"; }
acc=0
for n in 1 7 30 120; do
    p=$(ids $n $n)
    plain=$("$MUSE" run -m "$tmp/t.gguf" --tokens "$p" --ids -n 80 -b 16 2>/dev/null)
    spec=$("$MUSE" run -m "$tmp/t.gguf" --tokens "$p" --ids -n 80 -b 16 --draft-model "$tmp/d.gguf" 2>/dev/null)
    [ "$plain" = "$spec" ] || bad "planted pair, prompt $n: speculative differs"
    # the count from a run without the clock (the governor and the adaptive floor time the steps, so
    # on a loaded machine they park more): no governor, a fixed floor
    spec=$("$MUSE" run -m "$tmp/t.gguf" --tokens "$p" --ids -n 80 -b 16 --draft-model "$tmp/d.gguf" \
           --no-spec-governor --spec-draft-p-min 0.35 2>"$tmp/s.err")
    [ "$plain" = "$spec" ] || bad "planted pair, prompt $n: speculative (fixed floor) differs"
    grep -q "per floor" "$tmp/s.err" && bad "planted pair, prompt $n: a fixed floor reported per adaptive floor"
    a=$(sed -n 's/.* \([0-9]*\) accepted.*/\1/p' "$tmp/s.err")
    acc=$((acc + ${a:-0}))
    for seed in 1 2; do
        plain=$("$MUSE" run -m "$tmp/t.gguf" --tokens "$p" --ids -n 40 --temperature 0.8 --top-k 20 --seed $seed 2>/dev/null)
        spec=$("$MUSE" run -m "$tmp/t.gguf" --tokens "$p" --ids -n 40 --temperature 0.8 --top-k 20 --seed $seed \
               --draft-model "$tmp/d.gguf" --no-spec-governor 2>/dev/null)
        [ "$plain" = "$spec" ] || bad "planted pair, prompt $n, seed $seed: sampled output differs"
    done
done
[ "$acc" -gt 100 ] || bad "planted pair: only $acc drafts accepted"

# 3. muse chat: the same answer with the drafter
a=$("$MUSE" chat -m "$tmp/t.gguf" -p "hello there" -n 40 --temperature 0 2>/dev/null)
b=$("$MUSE" chat -m "$tmp/t.gguf" -p "hello there" -n 40 --temperature 0 --draft-model "$tmp/d.gguf" 2>"$tmp/c.err")
[ "$a" = "$b" ] || bad "muse chat: the answer changed with the drafter"
grep -q "speculative:" "$tmp/c.err" || bad "muse chat: no speculative summary in the turn line"
# context shifts go through the loop (the ring follows): at a turn's start (3 turns in 256
# positions) and in the middle of an answer (turn 2 outgrows 512 positions), the same answers
for run in "3|256|150|first question\nsecond question\nthird one here\n" "2|512|250|first question\nsecond question\n"; do
    IFS='|' read -r nt ctx n msgs <<<"$run"
    a=$(printf "$msgs" | "$MUSE" chat -m "$tmp/t.gguf" -n "$n" --ignore-eos --temp 0 -c "$ctx" 2>/dev/null)
    b=$(printf "$msgs" | "$MUSE" chat -m "$tmp/t.gguf" -n "$n" --ignore-eos --temp 0 -c "$ctx" --draft-model "$tmp/d.gguf" 2>"$tmp/cs.err")
    [ "$a" = "$b" ] || bad "muse chat, context shift (-c $ctx): the answers changed with the drafter"
    grep -q "^\[turn $nt: .*context shift: dropped the 2 oldest messages; speculative:" "$tmp/cs.err" ||
        bad "muse chat, context shift (-c $ctx): no shift with speculation in turn $nt"
done

# 4. muse bench --draft-model: plain and spec records (no clock in the drafting: acceptance is counted)
"$MUSE" bench -m "$tmp/t.gguf" --draft-model "$tmp/d.gguf" -p 0 -n 48 -r 2 --json --no-spec-governor --spec-draft-p-min 0.35 > "$tmp/b.json"
python3 - "$tmp/b.json" <<'PY' || fail=1
import json, sys
recs = json.load(open(sys.argv[1]))
tests = [r["test"] for r in recs]
assert tests == ["tg48", "tg48 plain", "tg48 spec"], tests
plain, spec = recs[1], recs[2]
for r in (plain, spec):
    assert r["n_gen"] == 48 and len(r["samples_ts"]) == 2 and r["avg_ts"] > 0 and r["median_ts"] > 0, r
assert not plain["speculative"] and spec["speculative"], (plain, spec)
for k in ("n_drafted", "n_accepted", "acceptance_rate", "mean_accepted_length", "verify_steps", "speedup", "draft_model"):
    assert k in spec, ("missing", k)
assert spec["n_accepted"] > 0 and 0 < spec["acceptance_rate"] <= 1 and spec["mean_accepted_length"] > 1, spec
print("bench json ok")
PY
"$MUSE" bench -m "$tmp/t.gguf" --draft-model "$tmp/d.gguf" -p 0 -n 16 -r 1 > "$tmp/b.md"
grep -q '| tg16 spec |' "$tmp/b.md" && grep -q '^speculative (.*acceptance' "$tmp/b.md" || bad "bench table: $(cat "$tmp/b.md")"

# 5. errors: one line each, exit status 1 (bad file) or 2 (bad flag)
err1() { # CMD... : expect exit $1 and one stderr line
    local want=$1; shift
    set +e; "$@" > /dev/null 2> "$tmp/e"; local st=$?; set -e
    [ "$st" = "$want" ] || bad "exit $st (want $want): $*"
    [ "$(wc -l < "$tmp/e")" -ge 1 ] || bad "no message: $*"
}
err1 1 "$MUSE" run -m "$tmp/t.gguf" --tokens 1,2 -n 2 --draft-model "$tmp/t.gguf"
grep -q "dflash\|drafter\|architecture" "$tmp/e" || bad "a text model as the drafter: $(cat "$tmp/e")"
err1 1 "$MUSE" run -m "$tmp/t.gguf" --tokens 1,2 -n 2 --draft-model "$G/df-drafter.gguf"
err1 1 "$MUSE" run -m "$tmp/t.gguf" --tokens 1,2 -n 2 --draft-model "$tmp/missing.gguf"
err1 2 "$MUSE" run -m "$tmp/t.gguf" --tokens 1,2 --spec-type ngram-simple
err1 2 "$MUSE" run -m "$tmp/t.gguf" --tokens 1,2 --spec-draft-p-min 1.5
err1 2 "$MUSE" run -m "$tmp/t.gguf" --tokens 1,2 --spec-draft-n-max -1
err1 2 "$MUSE" chat -m "$tmp/t.gguf" -p hi --draft-kv q4
err1 2 "$MUSE" serve -m "$tmp/t.gguf" --spec-draft-n-max x
[ "$fail" -eq 0 ] && echo "test_spec_cli: ok"
exit "$fail"
