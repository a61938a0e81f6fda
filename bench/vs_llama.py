#!/usr/bin/env python3
"""Side-by-side prefill/decode speed of muse and llama.cpp on the same GGUF files.

    python3 bench/vs_llama.py --llama-bench PATH/llama-bench [--muse build/muse]
        [-p 512] [-n 64] [-t 2] [--rounds 3] MODEL.gguf [MODEL.gguf ...]

llama-bench is not part of muse (build it from llama.cpp yourself). On a shared machine the two
engines are alternated: each round runs `muse bench -r 1` then `llama-bench -r 1` on the same
file (each after its own warm-up), so slow phases of the machine hit both. Prints a markdown
table of the median and the best tok/s of each engine over the rounds and muse / llama.cpp (on
a machine shared with other jobs the best round is the closest to the uncontended rate);
--json writes every sample as well.

--cpu-time (for a machine shared with other jobs, where a waiting thread's wall time says
nothing about the engine): each engine's rate from the CPU time its process used, the same way
for both: every test runs twice per round, with -r 1 and with -r 3 (each with its own load and
warm-up), and the rate is 2 * tokens * threads / (CPU(-r 3) - CPU(-r 1)); CPU time of all the
process's threads, so an engine whose idle threads spin (llama.cpp's OpenMP) is charged for it
at -t > 1. Tests: pp (-p) and tg (-n), each at -d.
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    start = out.find("[")
    return json.loads(out[start:])


def cpu_seconds(cmd):
    """CPU time (user + system) of running cmd to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_rate(cmd_of_reps, tokens, threads):
    """tokens/s by CPU time: two runs differing by two repetitions."""
    t1 = cpu_seconds(cmd_of_reps(1))
    t3 = cpu_seconds(cmd_of_reps(3))
    return 2 * tokens * threads / max(t3 - t1, 1e-9)


def llama_records(records):
    res = {}
    for r in records:
        name = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        if r.get("n_depth"):
            name += f" @ d{r['n_depth']}"
        res[name] = r["avg_ts"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--muse", default="build/muse")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-d", type=int, default=0)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--muse-args", default="", help="extra arguments for muse bench")
    ap.add_argument("--llama-args", default="", help="extra arguments for llama-bench (e.g. '-fa 1')")
    ap.add_argument("--json", help="write all samples to this file")
    ap.add_argument("--cpu-time", action="store_true", help="rates from process CPU time (see above)")
    a = ap.parse_args()

    table, dump = [], []
    for model in a.models:
        got = {"muse": {}, "llama.cpp": {}}
        for _ in range(a.rounds):
            if a.cpu_time:
                depth = f" @ d{a.d}" if a.d else ""
                tests = [(f"pp{a.p}{depth}", a.p, 0, a.p)] if a.p else []
                tests += [(f"tg{a.n}{depth}", 0, a.n, a.n)] if a.n else []
                for name, p, n, tokens in tests:
                    common = ["-m", model, "-p", str(p), "-n", str(n), "-d", str(a.d), "-t", str(a.t)]
                    got["muse"].setdefault(name, []).append(cpu_rate(
                        lambda r: [a.muse, "bench"] + common + ["-r", str(r)] + a.muse_args.split(), tokens, a.t))
                    got["llama.cpp"].setdefault(name, []).append(cpu_rate(
                        lambda r: [a.llama_bench] + common + ["-r", str(r)] + a.llama_args.split(), tokens, a.t))
                continue
            m = run_json([a.muse, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-d", str(a.d),
                          "-t", str(a.t), "-r", "1", "--json"] + a.muse_args.split())
            l = run_json([a.llama_bench, "-m", model, "-p", str(a.p), "-n", str(a.n), "-d", str(a.d),
                          "-t", str(a.t), "-r", "1", "-o", "json"] + a.llama_args.split())
            for name, ts in llama_records(m).items():
                got["muse"].setdefault(name, []).append(ts)
            for name, ts in llama_records(l).items():
                got["llama.cpp"].setdefault(name, []).append(ts)
        dump.append({"model": model, "samples_ts": got})
        for test in got["muse"]:
            m_s, l_s = got["muse"][test], got["llama.cpp"].get(test, [float("nan")])
            table.append((model.rsplit("/", 1)[-1], test, statistics.median(m_s), statistics.median(l_s), max(m_s),
                          max(l_s)))
        print(f"done: {model}", file=sys.stderr, flush=True)

    print("| model | test | muse t/s median (best) | llama.cpp t/s median (best) | muse / llama.cpp median (best) |")
    print("|---|---|---:|---:|---:|")
    for model, test, mu, ll, mb, lb in table:
        print(f"| {model} | {test} | {mu:.2f} ({mb:.2f}) | {ll:.2f} ({lb:.2f}) | {mu / ll:.2f}x ({mb / lb:.2f}x) |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dump, f, indent=1)


if __name__ == "__main__":
    main()
