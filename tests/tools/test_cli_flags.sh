#!/usr/bin/env bash
# The CLI's flags and errors as a llama.cpp user expects them: llama.cpp spellings accepted,
# one error line with a --help hint (never the whole usage), one "muse CMD:" prefix, the file
# named once, ranges checked with the allowed range in the message, - for standard input,
# `muse help CMD`, `muse info -m`, the version with its commit, serve failing before it listens,
# the default context (the model's, capped by the memory available), and -c above it (a warning).
set -uo pipefail
MUSE="${MUSE:-build/muse}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

"$MUSE" synth --preset tiny -o "$tmp/m.gguf" -q || { echo "synth failed"; exit 1; }
M="$tmp/m.gguf"

# one error line: "muse CMD: unknown option '--x' (see 'muse CMD --help')", status 2
for cmd in run chat logits bench info tokenize template synth serve perplexity quantize; do
    "$MUSE" $cmd --no-such-flag > "$tmp/o" 2> "$tmp/e"; rc=$?
    check "$cmd: unknown option is one line + hint, status 2" \
        '[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -qx "muse $cmd: unknown option '"'"'--no-such-flag'"'"' (see '"'"'muse $cmd --help'"'"')" "$tmp/e" && [ ! -s "$tmp/o" ]'
done
"$MUSE" run -m "$M" -p > /dev/null 2> "$tmp/e"; rc=$?
check "missing value: one line + hint" '[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "^muse run: option -p needs a value (see" "$tmp/e"'
"$MUSE" run -p x > /dev/null 2> "$tmp/e"; rc=$?
check "missing -m: one line + hint" '[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q "^muse run: -m MODEL is required (see" "$tmp/e"'

# the file is named once
"$MUSE" run -m "$tmp/none.gguf" -p x > /dev/null 2> "$tmp/e"; rc=$?
check "missing model: one line, the file named once" \
    '[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && [ "$(grep -o "none.gguf" "$tmp/e" | wc -l)" -eq 1 ] && grep -q "^muse run: " "$tmp/e"'
"$MUSE" chat -m "$tmp/none.gguf" -p x > /dev/null 2> "$tmp/e"
check "chat: the file named once" '[ "$(grep -o "none.gguf" "$tmp/e" | wc -l)" -eq 1 ]'

# ranges, with the allowed range in the message
bad() { # bad CMD FLAG VALUE EXPECTED-SUBSTRING
    local cmd=$1 flag=$2 val=$3 want=$4 extra=()
    [ "$cmd" = serve ] || extra=(-p x)
    "$MUSE" $cmd -m "$M" "${extra[@]}" "$flag" "$val" > /dev/null 2> "$tmp/e"; local rc=$?
    check "$cmd $flag $val refused ($want)" '[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/e")" -eq 1 ] && grep -q -- "$want" "$tmp/e"'
}
bad run -t 1000 "1..256"
bad run -t 0 "1..256"
bad run --top-p 1.5 "0 and <= 1"
bad run --min-p -0.1 "0 and <= 1"
bad run --temp -1 ">= 0"
bad run --temp nan "a number"
bad run --repeat-penalty 0 "> 0"
bad run --presence-penalty 3 "<= 2"
bad run -c -5 "0.."
bad run -n -7 "0.."
bad chat --top-p 2 "0 and <= 1"
bad chat -t 999 "1..256"
bad serve --top-p 2 "0 and <= 1"
bad run --kv q4 "f16, f32 or q8_0"
# values that name nothing are bad values too (they exited 1, as if a file were at fault: issue 32 item 6)
bad run --backend gpu "expected cpu, ref, vulkan or auto"
bad chat --backend nope "expected cpu, ref, vulkan or auto"
bad serve --backend nope "expected cpu, ref, vulkan or auto"
bad run --grammar 'root ::= (' "grammar line 1"
bad run --grammar nope "expecting '::='"
bad chat --json-schema '{"type": 5' "JSON schema"
bad run -j '[' "JSON schema"
bad run -r "" "non-empty"
bad chat --reverse-prompt "" "non-empty"
for cmd in logits bench; do
    "$MUSE" $cmd -m "$M" --backend nope > /dev/null 2> "$tmp/e"; rc=$?
    check "$cmd --backend nope refused (2)" '[ $rc -eq 2 ] && grep -q "expected cpu, ref, vulkan or auto" "$tmp/e"'
done
echo 'root ::= "a"' > "$tmp/g.gbnf"; echo 'root ::= (' > "$tmp/bad.gbnf"
"$MUSE" run -m "$M" -p x -n 1 --grammar-file "$tmp/bad.gbnf" > /dev/null 2> "$tmp/e"; rc=$?
check "a grammar file that does not compile: the file's error (1)" '[ $rc -eq 1 ] && grep -q "grammar-file" "$tmp/e"'
"$MUSE" run -m "$M" -p x -n 1 --temp 0 --grammar-file "$tmp/g.gbnf" > /dev/null 2>&1
check "a good grammar file runs" '[ $? -eq 0 ]'
"$MUSE" run -m "$M" -p x -n 1 -v --kv f32 > /dev/null 2> "$tmp/kv1"
"$MUSE" run -m "$M" -p x -n 1 -v -ctk f32 -ctv f32 > /dev/null 2> "$tmp/kv2"
check "--kv f32 and -ctk f32 -ctv f32 both make an f32 cache" 'grep -q "KV f32" "$tmp/kv1" && grep -q "KV f32" "$tmp/kv2"'
"$MUSE" run -m "$M" -p x -ctk q8_0 > /dev/null 2> "$tmp/e"
check "-ctk without a matching -ctv: a clear error" 'grep -q "ctv" "$tmp/e"'
# -c above the trained context (4096): allowed with a warning, as llama.cpp (issue 32 item 2)
"$MUSE" run -m "$M" -p x -n 1 -c 8192 > /dev/null 2> "$tmp/e"; rc=$?
check "-c above the trained context runs, with a warning" '[ $rc -eq 0 ] && grep -q "larger than the model was trained for (4096)" "$tmp/e"'
"$MUSE" run -m "$M" -p x -n 1 -c 4096 > /dev/null 2> "$tmp/e"
check "no warning within it" '! grep -q "trained for" "$tmp/e"'

# llama.cpp spellings: the same tokens as muse's own
"$MUSE" run -m "$M" -p "Hello" --max-tokens 6 --ctx-size 64 --batch 8 --threads 1 --seed 3 --temperature 0.7 --top-k 20 \
    > "$tmp/a" 2>/dev/null
"$MUSE" run -m "$M" -p "Hello" -n 6 -c 64 -b 8 -t 1 -s 3 --temp 0.7 --top-k 20 -ctk f16 -ctv f16 -fa on -ngl 99 \
    --no-mmap > "$tmp/b" 2> "$tmp/b.err"
check "llama.cpp spellings give the same output" '[ -s "$tmp/a" ] && cmp -s "$tmp/a" "$tmp/b"'
check "-ngl: a one-line note" '[ "$(grep -c "ngl is ignored: muse runs on the CPU" "$tmp/b.err")" -eq 1 ]'
"$MUSE" run -m "$M" -p "Hello" -n 6 -c 64 --n-predict 6 --batch-size 8 -fa --mlock -lm mmap -v > /dev/null 2> "$tmp/v.err"
check "-fa without a value, --batch-size, --mlock, -lm, -v" '[ $? -eq 0 ] && grep -q "context 64 positions" "$tmp/v.err"'

# every sampling flag of run is a flag of chat too (checked without inference: --dump-prompt)
for f in "--temperature 0.5" "--temp 0.5" "--top-k 5" "--top-p 0.9" "--min-p 0.1" "--repeat-penalty 1.1" \
         "--repeat-last-n 32" "--presence-penalty 0.5" "--frequency-penalty 0.5" "--seed 1" "-s 1"; do
    "$MUSE" chat -m "$M" -p hi --dump-prompt $f > /dev/null 2> "$tmp/e"
    check "chat takes $f" '[ $? -eq 0 ]'
done
"$MUSE" chat -m "$M" -p hi --dump-prompt --jinja -sys "Be brief." > "$tmp/sys" 2>/dev/null
check "chat: --jinja accepted, -sys sets the system prompt" 'grep -q "Be brief." "$tmp/sys"'
echo '{{ "T:" }}{% for m in messages %}{{ m.content }}{% endfor %}' > "$tmp/t.jinja"
"$MUSE" chat -m "$M" -p hi --dump-prompt --chat-template-file "$tmp/t.jinja" > "$tmp/tf" 2>/dev/null
check "chat --chat-template-file" 'head -n 1 "$tmp/tf" | grep -q "^T:hi"'

# standard input: run -f -, chat -f -
echo -n "Once upon a time" | "$MUSE" run -m "$M" -f - -n 4 --ids > "$tmp/stdin.ids" 2>/dev/null
"$MUSE" run -m "$M" -p "Once upon a time" -n 4 --ids > "$tmp/arg.ids" 2>/dev/null
check "run -f - reads standard input" '[ -s "$tmp/arg.ids" ] && cmp -s "$tmp/stdin.ids" "$tmp/arg.ids"'
echo -n "from stdin" | "$MUSE" chat -m "$M" --input - --dump-prompt > "$tmp/cs" 2>/dev/null
check "chat --input - reads standard input" 'grep -q "from stdin" "$tmp/cs"'

# help and info spellings
"$MUSE" help run > "$tmp/h1"; "$MUSE" run --help > "$tmp/h2"
check "muse help run = muse run --help" '[ -s "$tmp/h1" ] && cmp -s "$tmp/h1" "$tmp/h2"'
for cmd in info synth run logits draft tokenize template chat bench serve; do
    "$MUSE" $cmd --help > "$tmp/h" 2>&1
    check "$cmd --help: status 0 on stdout" '[ $? -eq 0 ] && grep -q "usage: muse $cmd" "$tmp/h"'
done
"$MUSE" info -m "$M" > "$tmp/i1"; "$MUSE" info "$M" > "$tmp/i2"
check "muse info -m X = muse info X" '[ -s "$tmp/i1" ] && cmp -s "$tmp/i1" "$tmp/i2"'

# version and commit (bench --json reports the same commit)
v=$("$MUSE" --version)
check "--version prints the version and the commit" '[[ "$v" =~ ^muse\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ ([0-9a-f]{12}(-dirty)?|unknown)\)$ ]]'
commit=$(sed -E 's/.*commit ([^)]*)\)/\1/' <<<"$v")
"$MUSE" bench -m "$M" -p 8 -n 0 -r 1 --json > "$tmp/bj" 2>/dev/null
check "bench --json reports the same commit" "python3 -c 'import json,sys; sys.exit(json.load(open(\"$tmp/bj\"))[0][\"build_commit\"] != \"$commit\")'"

# serve: a missing model fails before anything listens
"$MUSE" serve -m "$tmp/none.gguf" --port 0 > /dev/null 2> "$tmp/e"; rc=$?
check "serve with a missing model: status 1, never listening" '[ $rc -eq 1 ] && ! grep -q listening "$tmp/e" && grep -q "none.gguf" "$tmp/e"'

# the default context: the model's context_length, capped by the memory available
"$MUSE" synth --preset tiny --ctx 131072 -o "$tmp/long.gguf" -q
ctx_of() { MUSE_MEM_AVAILABLE=$1 "$MUSE" run -m "$tmp/long.gguf" --tokens 1,2 -n 1 -v 2>&1 >/dev/null | sed -n 's/.*context \([0-9]*\) positions.*/\1/p'; }
big=$(ctx_of $((64 << 30))); mid=$(ctx_of $((300 << 20))); small=$(ctx_of $((100 << 20)))
check "plenty of memory: the trained context ($big)" '[ "$big" = 131072 ]'
check "300 MiB: capped below it, a multiple of 256 ($mid)" '[ -n "$mid" ] && [ "$mid" -lt 131072 ] && [ "$mid" -gt 4096 ] && [ $((mid % 256)) -eq 0 ]'
check "too little memory: never below 4096 ($small)" '[ "$small" = 4096 ]'
exit $fail
