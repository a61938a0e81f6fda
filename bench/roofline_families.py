#!/usr/bin/env python3
"""Decode of every weight family against the read-bandwidth roofline, beside llama.cpp and
ik_llama.cpp (issue 34 item 2; docs/perf.md "Every family against the roofline").

For each type T: the 8-layer n_embd 2048 synthetic file of docs/perf.md's prefill section with
blk.*=T (token_embd Q4_K, output Q6_K), made with `muse synth` when missing; then, for each thread
count, R rounds in which the engines alternate: `muse bench -p 0 -n N --roofline` (its tg, the
probed read bandwidth and the roofline = bandwidth / bytes read per token), llama.cpp's and
ik_llama.cpp's `llama-bench -p 0 -n N` (ik also with `-rtr 1`, its run-time repack). Prints a
markdown table of medians. Engines or types a reference cannot run are left blank.

    python3 bench/roofline_families.py --llama LLAMA_BIN_DIR --ik IK_BIN_DIR \
        [--types q8_0,q4_k,...] [--threads 1,2] [--rounds 3] [--n 32] [--dir /tmp/muse-roofline]

The level muse runs at is MUSE_CPU's (e.g. MUSE_CPU=avx2 on an AVX-512 CPU). Not part of the
test suite: a quiet machine is needed (a busy one shows in the probed bandwidth column).
"""
import argparse, json, os, statistics, subprocess, sys

TYPES = "q8_0,q4_0,q4_k,q5_k,q6_k,q2_k,q3_k,iq4_xs,iq4_nl,iq3_s,iq3_xxs,iq2_s,iq2_xs,iq2_xxs,iq1_m,iq1_s,tq2_0,tq1_0"


def run(cmd, timeout=900):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return p.stdout if p.returncode == 0 else None


def first_json(out):
    """the tg record of a jsonl (muse) or json array (llama-bench) output"""
    if not out:
        return None
    out = out.strip()
    recs = json.loads(out) if out.startswith("[") else [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    for r in recs:
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            return r
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--muse", default=os.environ.get("MUSE", "build/muse"))
    ap.add_argument("--llama", help="llama.cpp bin dir (llama-bench)")
    ap.add_argument("--ik", help="ik_llama.cpp bin dir (llama-bench)")
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--dir", default="/tmp/muse-roofline")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rows = []
    for t in a.types.split(","):
        f = os.path.join(a.dir, f"m8-{t}.gguf")
        if not os.path.exists(f):
            r = run([a.muse, "synth", "--layers", "8", "--embd", "2048", "--heads", "16", "--kv-heads", "2",
                     "--head-dim", "128", "--ff", "6144", "--vocab", "32000", "--window", "2048", "--ctx", "8192",
                     "--pattern", "4", "--values", "conditioned", "--types",
                     f"blk.*={t},token_embd=q4_k,output=q6_k", "-o", f, "-q"], timeout=1800)
            if r is None or not os.path.exists(f):
                print(f"{t}: muse synth failed, skipped", file=sys.stderr)
                continue
        for th in a.threads.split(","):
            res = {"muse": [], "bw": [], "roof": [], "llama": [], "ik": [], "ikrtr": []}
            for _ in range(a.rounds):
                r = first_json(run([a.muse, "bench", "-m", f, "-p", "0", "-n", str(a.n), "-r", "1", "-t", th,
                                    "--roofline", "-o", "jsonl"]))
                if r:
                    res["muse"].append(r["avg_ts"])
                    res["bw"].append(r["read_bw_gbs"])
                    res["roof"].append(r["roofline_ts"])
                for key, bindir, extra in (("llama", a.llama, []), ("ik", a.ik, ["-rtr", "0"]), ("ikrtr", a.ik, ["-rtr", "1"])):
                    if not bindir:
                        continue
                    r = first_json(run([os.path.join(bindir, "llama-bench"), "-m", f, "-p", "0", "-n", str(a.n),
                                        "-r", "1", "-t", th, "-o", "json"] + extra))
                    if r:
                        res[key].append(r["avg_ts"])
            med = {k: (statistics.median(v) if v else None) for k, v in res.items()}
            rows.append((t, th, med))
            m = med
            print(f"{t} t={th}: " + " ".join(f"{k}={v:.2f}" for k, v in m.items() if v is not None), file=sys.stderr, flush=True)
    fmt = lambda v, p=1: "" if v is None else f"{v:.{p}f}"
    ratio = lambda x, y: "" if (x is None or not y) else f"{x / y:.2f}x"
    print("| type | threads | muse tg t/s | read GB/s | roofline t/s | muse share | llama.cpp | ik_llama.cpp | ik -rtr 1 | muse / llama | muse / best ik |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t, th, m in rows:
        best_ik = max([v for v in (m["ik"], m["ikrtr"]) if v is not None], default=None)
        share = "" if not (m["muse"] and m["roof"]) else f"{100 * m['muse'] / m['roof']:.0f}%"
        print(f"| {t.upper()} | {th} | {fmt(m['muse'])} | {fmt(m['bw'])} | {fmt(m['roof'])} | {share} | {fmt(m['llama'])} | "
              f"{fmt(m['ik'])} | {fmt(m['ikrtr'])} | {ratio(m['muse'], m['llama'])} | {ratio(m['muse'], best_ik)} |")


if __name__ == "__main__":
    main()
