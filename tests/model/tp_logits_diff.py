#!/usr/bin/env python3
"""Compare two `muse logits` JSON dumps (the golden schema) row by row, by token id.

usage: tp_logits_diff.py A.json B.json TOL
Prints the largest absolute difference over every listed id of every row (prompt positions and
greedy steps) and whether the greedy continuations are the same; exits 1 when the difference
exceeds TOL or a row's id list of A is missing from B (the dumps must list the whole vocabulary:
--top n_vocab)."""
import json
import sys


def rows(d):
    return [p["top"] for p in d["positions"]] + [s["top"] for s in d.get("greedy_steps", [])]


def main():
    a, b, tol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
    ra, rb = rows(a), rows(b)
    if len(ra) != len(rb):
        print(f"row counts differ: {len(ra)} vs {len(rb)}")
        return 1
    worst = 0.0
    for i, (x, y) in enumerate(zip(ra, rb)):
        dx, dy = dict((t, v) for t, v in x), dict((t, v) for t, v in y)
        if set(dx) != set(dy):
            print(f"row {i}: the listed ids differ (dump the whole vocabulary)")
            return 1
        worst = max(worst, max(abs(dx[t] - dy[t]) for t in dx))
    same = a.get("greedy") == b.get("greedy")
    print(f"max |diff| {worst:.3g} over {len(ra)} rows (tolerance {tol:g}); greedy {'identical' if same else 'DIFFERS'}")
    return 0 if worst <= tol and same else 1


if __name__ == "__main__":
    sys.exit(main())
