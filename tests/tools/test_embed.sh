#!/usr/bin/env bash
# `muse embed`: OpenAI's embeddings JSON, one vector per non-empty input line (-p and -f), unit
# Euclidean norm by default, --embd-normalize -1 raw, --pooling none (a vector per token, the
# last one equal to --pooling last's), the usage token counts, and the usage errors (exit 2).
set -euo pipefail
MUSE="${MUSE:-build/muse}"
MODEL="${MUSE_SHARED:-../shared}/golden/text/small-q8_0.gguf"  # the golden 6-layer Q8_0 file
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
fail=0

"$MUSE" embed -m "$MODEL" -p $'hello world\n\nthe cat sat on the mat' --pooling mean > "$tmp/mean.json"
printf 'hello world\nthe cat sat on the mat\n' > "$tmp/in.txt"
"$MUSE" embed -m "$MODEL" -f "$tmp/in.txt" --pooling mean > "$tmp/file.json"
"$MUSE" embed -m "$MODEL" -p 'the cat sat on the mat' --pooling last --embd-normalize -1 > "$tmp/last.json"
"$MUSE" embed -m "$MODEL" -p 'the cat sat on the mat' --pooling none --embd-normalize -1 > "$tmp/none.json"
python3 - "$tmp" <<'PY' || fail=1
import json, math, sys
d = sys.argv[1]
mean = json.load(open(d + "/mean.json"))
assert mean["object"] == "list" and mean["pooling"] == "mean", mean.keys()
assert [e["index"] for e in mean["data"]] == [0, 1], "one vector per non-empty line"
for e in mean["data"]:
    v = e["embedding"]
    assert e["object"] == "embedding" and len(v) > 8 and all(isinstance(x, float) for x in v)
    n = math.sqrt(sum(x * x for x in v))
    assert abs(n - 1) < 1e-5, n
assert mean["data"][0]["embedding"] != mean["data"][1]["embedding"]
assert mean["usage"]["prompt_tokens"] == mean["usage"]["total_tokens"] > 2
assert json.load(open(d + "/file.json"))["data"] == mean["data"], "-f and -p differ"
last = json.load(open(d + "/last.json"))["data"][0]["embedding"]
none = json.load(open(d + "/none.json"))
rows = none["data"][0]["embedding"]
assert none["pooling"] == "none" and len(rows) == none["usage"]["prompt_tokens"], (len(rows), none["usage"])
assert rows[-1] == last, "the last token's state is --pooling last's"
assert abs(math.sqrt(sum(x * x for x in last)) - 1) > 1e-3, "--embd-normalize -1 left it raw"
print("embed ok")
PY
for bad in "--pooling max" "--embd-normalize x" "--bogus"; do
    set +e; "$MUSE" embed -m "$MODEL" -p hi $bad > /dev/null 2>&1; rc=$?; set -e
    [ "$rc" -eq 2 ] || { echo "'$bad' exited $rc, not 2"; fail=1; }
done
set +e; "$MUSE" embed -m "$MODEL" > /dev/null 2>&1; rc=$?; set -e
[ "$rc" -eq 2 ] || { echo "no input exited $rc, not 2"; fail=1; }
[ "$fail" -eq 0 ] && echo "test_embed: ok"
exit "$fail"
