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

# The answers of the random-weight model depend on the CPU's rounding, and the history keeps only
# part of them (the final channel), so the context-shift cases use a template that writes every
# kept answer as the same text: the prompts' lengths are the test's own. They are measured here,
# and the context is sized from them.
tpl="$tmp/fixed_answers.jinja"
printf '%s' '<|begin_of_text|>{% for m in messages %}<|start|>{{ m.role }}<|message|>{% if m.role == "assistant" %}(an answer){% else %}{{ m.content }}{% endif %}<|eot|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}' > "$tpl"
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
turn_prompt() { sed -n "s/^\[turn $1: prompt \([0-9]*\) tokens.*/\1/p" "$2"; }

# context shift at a turn's start: 4 exchanges in a context one token short of turn 4's prompt;
# turn 4 must drop the oldest exchange, turn 3 (and its answer) need not
msgs='a b c d e f g\nh i j k l m n\no p q r s\nt u v w\n'
printf "$msgs" | "$MUSE" chat -m "$M" --template "$tpl" -n 1 --temp 0 -c 2048 > /dev/null 2> "$tmp/cslen.err"
s3=$(turn_prompt 3 "$tmp/cslen.err"); s4=$(turn_prompt 4 "$tmp/cslen.err")
cs=$((${s4:-0} - 1)); ns=$((cs - ${s3:-0}))  # at most n more tokens after turn 3's prompt: it never shifts
check "context shift: the lengths force it at turn 4 (prompts $s3, $s4; -c $cs -n $ns)" \
    '[ -n "$s3" ] && [ $((s3 + ns)) -le $cs ] && [ $((s4 + $(min $ns $((cs / 4))))) -gt $cs ]'
printf "$msgs" | "$MUSE" chat -m "$M" --template "$tpl" -n $ns --temp 0 -c $cs > /dev/null 2> "$tmp/cs.err"
check "context shift: every turn answered" '[ "$(grep -c "^\[turn " "$tmp/cs.err")" -eq 4 ] && ! grep -q "needs .* tokens" "$tmp/cs.err"'
check "context shift: turn 4 dropped the oldest messages, turns 1-3 nothing" \
    'grep -q "^\[turn 4: prompt .*context shift: dropped the [0-9]* oldest messages" "$tmp/cs.err" &&
     [ "$(grep -c "context shift: dropped" "$tmp/cs.err")" -eq 1 ]'
printf "$msgs" | "$MUSE" chat -m "$M" --template "$tpl" -n $ns --temp 0 -c $cs --no-context-shift > /dev/null 2> "$tmp/ncs.err"
check "--no-context-shift: the turn that does not fit fails, clearly" 'grep -q "the conversation needs $s4 tokens but the context holds $cs" "$tmp/ncs.err"'

# context shift in the middle of an answer: turn 2's prompt leaves too little room for its 250
# tokens; the oldest exchange goes and the answer goes on
q1="first question: $(seq -s ' ' 1 60)"
q2="second question: $(seq -s ' ' 61 120)"
printf '%s\n%s\n' "$q1" "$q2" | "$MUSE" chat -m "$M" --template "$tpl" -n 1 --temp 0 -c 2048 > /dev/null 2> "$tmp/len.err"
p1=$(turn_prompt 1 "$tmp/len.err")
p2=$(turn_prompt 2 "$tmp/len.err")
p2_alone=$("$MUSE" chat -m "$M" --template "$tpl" -p "$q2" --dump-prompt 2>&1 | sed -n 's/^tokens (\([0-9]*\)).*/\1/p')
n=250; c=$((${p2:-0} + 200)); q=$((c / 4)); k=$((c - ${p2:-0} + 1))  # k: answer tokens when the context fills
# turn 1 answers in full; turn 2 starts without a shift (a quarter of the context free), fills the
# context after k < n tokens (at most half the context, so it may shift), and after the shift its
# prompt alone leaves room for what is left
check "mid-answer shift: the lengths force it (prompts $p1, $p2 and $p2_alone alone; -c $c -n $n)" \
    '[ -n "$p1" ] && [ -n "$p2_alone" ] && [ $((p1 + n)) -le $c ] && [ $((p2 + $(min $n $q))) -le $c ] &&
     [ $k -lt $n ] && [ $k -le $((c / 2)) ] && [ $((p2_alone + k + $(min $((n - k)) $q))) -le $c ]'
printf '%s\n%s\n' "$q1" "$q2" |
    "$MUSE" chat -m "$M" --template "$tpl" -n $n --ignore-eos --temp 0 -c $c > /dev/null 2> "$tmp/mid.err"
check "mid-answer shift: turn 1 completes its $n tokens without a shift" \
    'grep -q "^\[turn 1: prompt $p1 tokens.*generated $n tokens.*stop: max-tokens\]" "$tmp/mid.err"'
check "mid-answer shift: turn 2 (prompt $p2 + $n > $c) completes its $n tokens after dropping turn 1" \
    'grep -q "^\[turn 2: prompt $p2 tokens.*generated $n tokens.*stop: max-tokens; context shift: dropped the 2 oldest messages\]" "$tmp/mid.err"'
printf '%s\n%s\n' "$q1" "$q2" |
    "$MUSE" chat -m "$M" --template "$tpl" -n $n --ignore-eos --temp 0 -c $c --no-context-shift > /dev/null 2> "$tmp/midn.err"
check "mid-answer, --no-context-shift: turn 2 stops when the context is full, after $k tokens" \
    'grep -q "^\[turn 2: prompt $p2 tokens.*generated $k tokens.*stop: context full\]" "$tmp/midn.err"'
exit $fail
