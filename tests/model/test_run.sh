#!/usr/bin/env bash
# muse run end to end on a synthetic model: text and token-id prompts, greedy determinism,
# streaming output with the speed line, a prompt longer than the context is an error, bad files.
set -uo pipefail
MUSE="${MUSE:-build/muse}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

"$MUSE" synth --preset tiny -o "$tmp/m.gguf" -q || { echo "synth failed"; exit 1; }

"$MUSE" run -m "$tmp/m.gguf" -p "Once upon a time" -n 12 > "$tmp/a.out" 2> "$tmp/a.err"
check "text prompt runs" '[ $? -eq 0 ]'
check "speed line" 'grep -q "prompt [0-9]* tokens in .* tok/s); generated 12 tokens" "$tmp/a.err"'
check "text printed" '[ -s "$tmp/a.out" ]'
"$MUSE" run -m "$tmp/m.gguf" -p "Once upon a time" -n 12 > "$tmp/b.out" 2>/dev/null
check "greedy is deterministic" 'cmp -s "$tmp/a.out" "$tmp/b.out"'

"$MUSE" run -m "$tmp/m.gguf" --tokens 5,6,7,8 -n 6 --ids > "$tmp/ids.out" 2>/dev/null
check "token ids in, six ids out, comma-separated like --tokens" 'grep -Eq "^[0-9]+(,[0-9]+){5}$" "$tmp/ids.out"'
# the first generated id equals the greedy argmax `muse logits` reports
first=$(cut -d, -f1 "$tmp/ids.out")
"$MUSE" logits -m "$tmp/m.gguf" --tokens 5,6,7,8 -n 1 > "$tmp/l.json"
check "run agrees with logits" "python3 -c 'import json,sys; sys.exit(0 if json.load(open(\"$tmp/l.json\"))[\"greedy\"][0] == $first else 1)'"

"$MUSE" run -m "$tmp/m.gguf" --tokens 5,6,7,8 -n 8 --temperature 1.0 --top-k 64 --top-p 0.95 --seed 7 --ids > "$tmp/s1" 2>/dev/null
"$MUSE" run -m "$tmp/m.gguf" --tokens 5,6,7,8 -n 8 --temperature 1.0 --top-k 64 --top-p 0.95 --seed 7 --ids > "$tmp/s2" 2>/dev/null
check "sampling with a seed is reproducible" 'cmp -s "$tmp/s1" "$tmp/s2" && [ "$(tr , " " < "$tmp/s1" | wc -w)" -eq 8 ]'

"$MUSE" run -m "$tmp/m.gguf" --tokens 1,2,3,4,5,6,7,8,9,10 --ctx-size 8 -n 4 > /dev/null 2> "$tmp/ctx.err"
check "prompt longer than the context is an error" '[ $? -ne 0 ] && grep -q "context" "$tmp/ctx.err"'

"$MUSE" run -m "$tmp/m.gguf" --tokens 1,2,3 --ctx-size 6 -n 10 --ids > "$tmp/full.out" 2> "$tmp/full.err"
check "generation stops when the context is full" 'grep -q "stop: context full" "$tmp/full.err" && [ "$(tr , " " < "$tmp/full.out" | wc -w)" -eq 4 ]'

# the prompt is echoed before the continuation (as llama-completion), unless --no-display-prompt
"$MUSE" run -m "$tmp/m.gguf" -p "Once upon a time" -n 4 > "$tmp/echo.out" 2>/dev/null
"$MUSE" run -m "$tmp/m.gguf" -p "Once upon a time" -n 4 --no-display-prompt > "$tmp/noecho.out" 2>/dev/null
check "prompt echoed" 'head -c 16 "$tmp/echo.out" | grep -q "^Once upon a time"'
check "--no-display-prompt: only the continuation" '[ "$(cat "$tmp/echo.out")" = "Once upon a time$(cat "$tmp/noecho.out")" ]'
# the same tokens whatever the loading mode (mmap, --no-mmap, --mlock)
"$MUSE" run -m "$tmp/m.gguf" --tokens 5,6,7,8 -n 6 --ids --no-mmap > "$tmp/nm.out" 2>/dev/null
"$MUSE" run -m "$tmp/m.gguf" --tokens 5,6,7,8 -n 6 --ids --mlock > "$tmp/ml.out" 2> "$tmp/ml.err"
check "--no-mmap gives the same tokens" 'cmp -s "$tmp/ids.out" "$tmp/nm.out"'
check "--mlock gives the same tokens (or a clear ulimit error)" 'cmp -s "$tmp/ids.out" "$tmp/ml.out" || grep -q "ulimit -l" "$tmp/ml.err"'

head -c 1000 /dev/urandom > "$tmp/junk.gguf"
"$MUSE" run -m "$tmp/junk.gguf" --tokens 1 > /dev/null 2> "$tmp/junk.err"
check "junk file is a clear error" '[ $? -ne 0 ] && [ "$(wc -l < "$tmp/junk.err")" -eq 1 ]'

MUSE_LAYER_TRACE=1 MUSE_LAYER_TRACE_POS=2 "$MUSE" logits -m "$tmp/m.gguf" --tokens 5,6,7 > /dev/null 2> "$tmp/trace.err"
n_layer=$(python3 -c "print(sum(1 for l in open('$tmp/trace.err') if l.startswith('layer-trace pos=0 ')))")
check "layer trace: lines for positions 0 and 1 only" 'grep -q "^layer-trace pos=1 layer=0 sum=" "$tmp/trace.err" && ! grep -q "pos=2" "$tmp/trace.err" && [ "$n_layer" -ge 2 ]'
exit $fail
