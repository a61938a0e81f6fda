#!/usr/bin/env bash
# muse chat's input and long conversations, through a pipe: a line ending in a backslash and a
# """ block are one message each; a conversation longer than the context drops its oldest
# exchanges and goes on (at a turn's start and in the middle of an answer), or fails the turn
# with --no-context-shift.
set -uo pipefail
MUSE="${MUSE:-build/muse}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
"$MUSE" synth --preset tiny -o "$tmp/m.gguf" -q || { echo "synth failed"; exit 1; }
M="$tmp/m.gguf"

printf 'first line \\\nsecond line\n"""\nblock one\nblock two\n"""\n"""inline block"""\n/exit\n' |
    "$MUSE" chat -m "$M" -n 4 --temp 0 > "$tmp/ml.out" 2> "$tmp/ml.err"
check "multi-line input: three messages, three turns" '[ "$(grep -c "^\[turn " "$tmp/ml.err")" -eq 3 ] && ! grep -q "^\[turn 4" "$tmp/ml.err"'
# the continued message is longer than its first line alone
printf 'first line\n/exit\n' | "$MUSE" chat -m "$M" -n 4 --temp 0 > /dev/null 2> "$tmp/one.err"
p_one=$(sed -n 's/^\[turn 1: prompt \([0-9]*\) tokens.*/\1/p' "$tmp/one.err")
p_two=$(sed -n 's/^\[turn 1: prompt \([0-9]*\) tokens.*/\1/p' "$tmp/ml.err")
check "a backslash joins the next line into the message ($p_two > $p_one tokens)" '[ -n "$p_one" ] && [ "$p_two" -gt "$p_one" ]'

# context shift at a turn's start: 4 exchanges in 256 positions
msgs='a b c d e f g\nh i j k l m n\no p q r s\nt u v w\n'
printf "$msgs" | "$MUSE" chat -m "$M" -n 30 --temp 0 -c 256 > /dev/null 2> "$tmp/cs.err"
check "context shift: every turn answered" '[ "$(grep -c "^\[turn " "$tmp/cs.err")" -eq 4 ] && ! grep -q "needs .* tokens" "$tmp/cs.err"'
check "context shift: the oldest messages dropped" 'grep -q "context shift: dropped the [0-9]* oldest messages" "$tmp/cs.err"'
printf "$msgs" | "$MUSE" chat -m "$M" -n 30 --temp 0 -c 256 --no-context-shift > /dev/null 2> "$tmp/ncs.err"
check "--no-context-shift: the turn that does not fit fails, clearly" 'grep -q "the conversation needs [0-9]* tokens but the context holds 256" "$tmp/ncs.err"'

# context shift in the middle of an answer: turn 2 fills the context while answering; the oldest
# exchange goes, the answer goes on to its 250 tokens
printf 'first question\nsecond question\n' |
    "$MUSE" chat -m "$M" -n 250 --ignore-eos --temp 0 -c 512 > /dev/null 2> "$tmp/mid.err"
check "mid-answer shift: turn 2 completes its 250 tokens after dropping turn 1" \
    'grep -q "^\[turn 2: .*generated 250 tokens.*stop: max-tokens; context shift: dropped the 2 oldest messages\]" "$tmp/mid.err"'
exit $fail
