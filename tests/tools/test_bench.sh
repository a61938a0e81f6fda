#!/usr/bin/env bash
# `muse bench`: the llama-bench JSON records (field names, counts, positive rates, samples per
# repeat, depth), the markdown table, comma lists (-p -n -t -b), -o jsonl|csv, --parallel (records
# per NPL, aggregate rates: NPL x tokens / seconds), and the usage errors.
set -euo pipefail
MUSE="${MUSE:-build/muse}"
SHARED="${MUSE_SHARED:-../shared}"
MODEL="$SHARED/golden/text/small-q8_0.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

"$MUSE" bench -m "$MODEL" -p 16 -n 4 -d 8 -r 3 -t 2 --json > "$tmp/b.json"
python3 - "$tmp/b.json" <<'PY' || fail=1
import json, sys
recs = json.load(open(sys.argv[1]))
assert isinstance(recs, list) and len(recs) == 2, recs
pp, tg = recs
for r in recs:
    for k in ("test", "n_prompt", "n_gen", "n_depth", "n_threads", "avg_ts", "stddev_ts", "samples_ts",
              "avg_ns", "stddev_ns", "samples_ns", "model_filename", "model_size", "model_n_params"):
        assert k in r, ("missing", k)
    assert r["n_threads"] == 2 and r["n_depth"] == 8, r
    assert len(r["samples_ts"]) == 3 and len(r["samples_ns"]) == 3, r
    assert all(x > 0 for x in r["samples_ts"]) and r["avg_ts"] > 0, r
    mean = sum(r["samples_ts"]) / 3
    assert abs(mean - r["avg_ts"]) <= 1e-6 * mean, (mean, r["avg_ts"])
    assert r["stddev_ts"] >= 0
    # rate and time agree: tokens / seconds
    n = r["n_prompt"] or r["n_gen"]
    for ts, ns in zip(r["samples_ts"], r["samples_ns"]):
        assert abs(ts - n / (ns * 1e-9)) <= 1e-3 * ts, (ts, ns)
assert pp["test"] == "pp16 @ d8" and pp["n_prompt"] == 16 and pp["n_gen"] == 0, pp
assert tg["test"] == "tg4 @ d8" and tg["n_prompt"] == 0 and tg["n_gen"] == 4, tg
assert pp["model_n_params"] > 6e6 and pp["model_size"] > 6e6, pp
# model_type as llama-bench's: architecture, the parameter count as model names write it, the type
import re
assert re.fullmatch(r"muse-glimmer \d+(\.\d)?[KMB] [A-Z0-9_]+", pp["model_type"]), pp["model_type"]
n, unit = re.match(r"muse-glimmer ([\d.]+)([KMB])", pp["model_type"]).groups()
count = float(n) * {"K": 1e3, "M": 1e6, "B": 1e9}[unit]
assert abs(count - pp["model_n_params"]) <= 0.05 * pp["model_n_params"], (count, pp["model_n_params"])
print("json ok")
PY

"$MUSE" bench -m "$MODEL" -p 8 -n 0 -r 1 > "$tmp/b.md"
grep -q '^| model | size | params | backend | threads | test | t/s |' "$tmp/b.md" || { echo "no table header"; fail=1; }
grep -q '| pp8 | ' "$tmp/b.md" || { echo "no pp8 row"; fail=1; }
# the model column is short (llama-bench's "muse-glimmer 6.6M Q8_0"), never "?B" or the layer list
grep -Eq '^\| muse-glimmer [0-9.]+[KMB] [A-Z0-9_]+ \| [0-9.]+ MiB \| [0-9.]+ M \|' "$tmp/b.md" || { echo "model column: $(sed -n 3p "$tmp/b.md")"; fail=1; }
# --no-warmup: the same records, without the warm-up runs
"$MUSE" bench -m "$MODEL" -p 8 -n 2 -r 1 --no-warmup -o jsonl > "$tmp/nw.jsonl" || { echo "--no-warmup refused"; fail=1; }
[ "$(wc -l < "$tmp/nw.jsonl")" -eq 2 ] || { echo "--no-warmup: $(cat "$tmp/nw.jsonl")"; fail=1; }
if grep -q 'tg' "$tmp/b.md"; then echo "tg row despite -n 0"; fail=1; fi

if "$MUSE" bench -p 8 > /dev/null 2>&1; then echo "missing -m accepted"; fail=1; fi
if "$MUSE" bench -m "$MODEL" -p 0 -n 0 > /dev/null 2>&1; then echo "-p 0 -n 0 accepted"; fail=1; fi
if "$MUSE" bench -m "$MODEL" -r 0 > /dev/null 2>&1; then echo "-r 0 accepted"; fail=1; fi
if "$MUSE" bench -m "$MODEL" -c 8 -p 16 > /dev/null 2>&1; then echo "context smaller than the test accepted"; fail=1; fi
# llama-bench's comma lists: every (threads, batch, depth) runs the pp tests then the tg tests
"$MUSE" bench -m "$MODEL" -p 8,16 -n 2,4 -t 1,2 -r 1 -o jsonl > "$tmp/l.jsonl"
python3 - "$tmp/l.jsonl" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["n_threads"], r["test"]) for r in recs]
want = [(t, x) for t in (1, 2) for x in ("pp8", "pp16", "tg2", "tg4")]
assert got == want, got
print("lists ok")
PY
"$MUSE" bench -m "$MODEL" -p 8 -n 2 -b 4,8 -r 1 -o csv > "$tmp/b.csv"
python3 - "$tmp/b.csv" <<'PY' || fail=1
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["n_batch"], r["test"]) for r in rows] == [("4", "pp8"), ("4", "tg2"), ("8", "pp8"), ("8", "tg2")], rows
assert all(float(r["avg_ts"]) > 0 and r["build_commit"] for r in rows), rows
print("csv ok")
PY
"$MUSE" bench -m "$MODEL" -p 8 -n 0 -r 1 -o md -b 4,8 > "$tmp/b2.md"
grep -q '^| model | size | params | backend | threads | n_batch | test | t/s |' "$tmp/b2.md" || { echo "no n_batch column"; fail=1; }
# --parallel: llama-batched-bench's aggregate rate, a record per NPL with n_parallel; -b 4 splits
# the prompts of 3 sequences (and a tg step of 3 rows fits)
"$MUSE" bench -m "$MODEL" -p 6 -n 3 -d 2 -np 1,3 -b 4 -r 2 -t 2 -o jsonl > "$tmp/p.jsonl"
python3 - "$tmp/p.jsonl" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["n_parallel"], r["test"]) for r in recs]
assert got == [(1, "pp6 @ d2"), (1, "tg3 @ d2"), (3, "pp6 @ d2"), (3, "tg3 @ d2")], got
for r in recs:
    n = (r["n_prompt"] or r["n_gen"]) * r["n_parallel"]
    for ts, ns in zip(r["samples_ts"], r["samples_ns"]):
        assert ts > 0 and abs(ts - n / (ns * 1e-9)) <= 1e-3 * ts, (r["test"], ts, ns)
print("parallel ok")
PY
"$MUSE" bench -m "$MODEL" -p 4 -n 0 -np 2 -r 1 > "$tmp/np.md"
grep -q '^| model | size | params | backend | threads | npl | test | t/s |' "$tmp/np.md" || { echo "no npl column"; fail=1; }
if "$MUSE" bench -m "$MODEL" -np 0 > /dev/null 2>&1; then echo "-np 0 accepted"; fail=1; fi
if "$MUSE" bench -m "$MODEL" -o xml > /dev/null 2>&1; then echo "-o xml accepted"; fail=1; fi
if "$MUSE" bench -m "$MODEL" -p 8,,16 > /dev/null 2>&1; then echo "empty list item accepted"; fail=1; fi
if "$MUSE" bench -m "$MODEL" -t 1,999 > /dev/null 2>&1; then echo "-t 999 accepted"; fail=1; fi

# MUSE_PROFILE=1: the table at exit (stderr), its stretches summing to the total it prints, a
# matmul stretch of one row and one of 16 (pp16), the output head among them; nothing without it
MUSE_PROFILE=1 "$MUSE" bench -m "$MODEL" -p 16 -n 2 -r 1 -t 2 > /dev/null 2> "$tmp/prof.txt"
python3 - "$tmp/prof.txt" <<'PY' || fail=1
import re, sys
lines = open(sys.argv[1]).read().splitlines()
head = [i for i, l in enumerate(lines) if l.startswith("MUSE_PROFILE: ")]
assert len(head) == 1, lines
total = float(re.search(r"([\d.]+) ms in all", lines[head[0]]).group(1))
rows = [l for l in lines[head[0] + 2:] if l.strip()]
ms = [float(l.split()[0]) for l in rows]
assert ms == sorted(ms, reverse=True) and abs(sum(ms) - total) <= 0.01 * len(ms) + 1e-3 * total, (ms, total)
assert any("matmul" in l and l.endswith("[1]") for l in rows), rows
assert any("matmul" in l and l.endswith("[16]") for l in rows), rows
assert any("output.weight" in l for l in rows), rows
assert all(int(l.split()[1]) > 0 for l in rows), rows
print("profile ok")
PY
"$MUSE" bench -m "$MODEL" -p 4 -n 0 -r 1 2> "$tmp/noprof.txt" > /dev/null
if grep -q MUSE_PROFILE "$tmp/noprof.txt"; then echo "profile printed without MUSE_PROFILE"; fail=1; fi

[ "$fail" -eq 0 ] && echo "test_bench: ok"
exit "$fail"
