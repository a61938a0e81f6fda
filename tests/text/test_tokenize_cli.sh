#!/usr/bin/env bash
# End-to-end checks of `muse tokenize` on the o200k stand-in vocabulary: ids equal tiktoken's
# (golden expected-tiktoken.jsonl), BOS handling, --special, --detokenize round trips of any
# bytes, and exit codes.
set -euo pipefail
MUSE="${MUSE:-build/muse}"
G="${MUSE_SHARED:-../shared}/golden/tokenizer"
M="$G/o200k-muse-vocab.gguf"
T="$(mktemp -d)"; trap 'rm -rf "$T"' EXIT
fail=0
check() { # check NAME GOT WANT
    if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '${2:0:200}' want '${3:0:200}'"; fail=1; fi
}

# expected ids (comma-separated) and raw text of a corpus line, via python's JSON parser
expect() { python3 -c "import json,sys
for l in open('$G/expected-tiktoken.jsonl'):
    d=json.loads(l)
    if d['id']==sys.argv[1]: print(','.join(map(str,d['ids'])))" "$1"; }
text_of() { python3 -c "import json,sys
for l in open('$G/corpus.jsonl', encoding='utf-8'):
    d=json.loads(l)
    if d['id']==sys.argv[1]: sys.stdout.buffer.write(d['text'].encode('utf-8'))" "$1" > "$2"; }

check "prose --no-bos" "$("$MUSE" tokenize -m "$M" --text 'Hello, world!' --no-bos)" "$(expect prose-002)"
check "BOS from add_bos_token" "$("$MUSE" tokenize -m "$M" --text 'Hello, world!')" "200000,$(expect prose-002)"

for doc in long-prose-en long-multilingual long-code-c; do
    text_of "$doc" "$T/$doc.txt"
    ids="$("$MUSE" tokenize -m "$M" --file "$T/$doc.txt" --no-bos)"
    check "$doc equals tiktoken" "$ids" "$(expect "$doc")"
    "$MUSE" tokenize -m "$M" --detokenize --ids "$ids" > "$T/$doc.back"
    if cmp -s "$T/$doc.txt" "$T/$doc.back"; then echo "ok   $doc round trip"; else echo "FAIL $doc round trip"; fail=1; fi
done

check "stdin" "$(printf 'Hello, world!' | "$MUSE" tokenize -m "$M" --file - --no-bos)" "$(expect prose-002)"
check "special off: text" "$("$MUSE" tokenize -m "$M" --text '<|eot|>' --no-bos | grep -c 200008 || true)" "0"
check "special on" "$("$MUSE" tokenize -m "$M" --text 'hi<|eot|>' --no-bos --special)" "3686,200008"
check "detokenize hides control" "$("$MUSE" tokenize -m "$M" --detokenize --ids 200000,3686,200008)" "hi"
check "detokenize --special" "$("$MUSE" tokenize -m "$M" --detokenize --ids 200000,3686,200008 --special)" \
      "<|begin_of_text|>hi<|eot|>"
check "json" "$("$MUSE" tokenize -m "$M" --text 'hi' --no-bos --json --pieces)" '{"n_tokens":1,"ids":[3686],"pieces":["hi"]}'
check "pieces" "$("$MUSE" tokenize -m "$M" --text ' the' --no-bos --pieces | tr -s ' ')" " 290 ' the'"

# arbitrary bytes (NUL, invalid UTF-8) survive tokenize -> detokenize
printf 'a\000b\377\376 caf\303\251 \355\240\200 \360\237\230' > "$T/bytes"
ids="$("$MUSE" tokenize -m "$M" --file "$T/bytes" --no-bos)"
"$MUSE" tokenize -m "$M" --detokenize --ids "$ids" > "$T/bytes.back"
if cmp -s "$T/bytes" "$T/bytes.back"; then echo "ok   invalid bytes round trip"; else echo "FAIL invalid bytes round trip"; fail=1; fi

set +e
"$MUSE" tokenize --text x >/dev/null 2>&1; check "missing -m exits 2" "$?" "2"
"$MUSE" tokenize -m "$M" --text x --file y >/dev/null 2>&1; check "--text and --file exits 2" "$?" "2"
"$MUSE" tokenize -m "$T/none.gguf" --text x >/dev/null 2>&1; check "missing model exits 1" "$?" "1"
"$MUSE" tokenize -m "$M" --detokenize --ids 999999 >/dev/null 2>&1; check "id out of range exits 1" "$?" "1"
exit $fail
