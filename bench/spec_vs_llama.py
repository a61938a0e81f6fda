#!/usr/bin/env python3
"""Speculative decoding side by side: muse and llama.cpp's DFlash on the same target + drafter.

    python3 bench/spec_vs_llama.py --llama-bin PATH/bin [--muse build/muse] -m TARGET.gguf
        -md DRAFTER.gguf -f PROMPT.txt [-n 256] [--n-max 3] [-t 2] [--rounds 5] [--json OUT]

llama.cpp is not part of muse (bring your own build with llama-completion and
llama-speculative-simple). Each round runs, on the same prompt file and greedy:
  - `muse bench -m T --draft-model D --input F -p 0 -n N -r 1 --json`: muse plain and speculative
    (the two alternate inside the run, each after its own warm-up);
  - `llama-completion -m T -f F -n N --temp 0 -no-cnv`: llama.cpp plain ("eval time" rate);
  - `llama-speculative-simple -m T -md D --spec-type draft-dflash --spec-draft-n-max K -f F -n N
    --temp 0`: llama.cpp speculative ("decoded ... speed", drafted, accepted).
so slow phases of a shared machine hit all four. llama.cpp runs with OMP_WAIT_POLICY=passive (with
OpenMP's default spinning, 2 threads on a shared 2-core box fell to ~1 t/s).

--cpu-time (for an oversubscribed machine, where wall clocks measure the neighbours): each of the
four is run twice, generating --short and N tokens, and its rate is (N - short) / the difference of
the process CPU time (user + sys, getrusage of the child) of the two runs: the decode work alone,
load and prompt cancelled out, measured the same way for both engines (muse through `muse run`).
Use with -t 1 (no thread waits in the CPU time). Prints the median and the best tok/s of each over
the rounds, muse's acceptance and mean accepted length, llama.cpp's acceptance, and the ratios.
"""
import argparse
import json
import os
import re
import statistics
import subprocess


def muse_round(a):
    cmd = [a.muse, "bench", "-m", a.m, "--draft-model", a.md, "--input", a.f, "-p", "0", "-n", str(a.n), "-r", "1",
           "-t", str(a.t), "--spec-draft-n-max", str(a.n_max), "--json"]
    if a.p_min is not None:
        cmd += ["--spec-draft-p-min", str(a.p_min)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    recs = json.loads(out[out.find("["):])
    plain = next(r for r in recs if r["test"].endswith("plain"))
    spec = next(r for r in recs if r["test"].endswith("spec"))
    return plain["median_ts"], spec["median_ts"], spec


LLAMA_ENV = dict(os.environ, OMP_WAIT_POLICY="passive")


def llama_plain(a):
    cmd = [os.path.join(a.llama_bin, "llama-completion"), "-m", a.m, "-f", a.f, "-n", str(a.n), "--temp", "0",
           "-t", str(a.t), "-no-cnv", "--ignore-eos"]
    for _ in range(3):  # on this shared box it now and then exits without its timings: run it again
        err = subprocess.run(cmd, check=True, capture_output=True, text=True, env=LLAMA_ENV).stderr
        for line in err.splitlines():
            m = re.search(r"(?<!prompt )\beval time =\s*[\d.]+ ms /\s*(\d+) runs.*?([\d.]+) tokens per second", line)
            if m:
                return float(m.group(2))
    raise RuntimeError("llama-completion printed no eval time:\n" + err[-2000:])


def llama_spec(a):
    cmd = [os.path.join(a.llama_bin, "llama-speculative-simple"), "-m", a.m, "-md", a.md, "--spec-type", "draft-dflash",
           "--spec-draft-n-max", str(a.n_max), "-f", a.f, "-n", str(a.n), "--temp", "0", "-t", str(a.t)]
    if a.p_min is not None:
        cmd += ["--spec-draft-p-min", str(a.p_min)]
    for _ in range(3):  # as llama_plain: now and then no timings
        err = subprocess.run(cmd, check=True, capture_output=True, text=True, env=LLAMA_ENV).stderr
        m = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", err)
        if m:
            break
    if not m:
        raise RuntimeError("llama-speculative-simple printed no timings:\n" + err[-2000:])
    speed = float(m.group(1))
    drafted = int(re.search(r"n_drafted = (\d+)", err).group(1))
    accepted = int(re.search(r"n_accept\s+= (\d+)", err).group(1))
    return speed, drafted, accepted


def cpu_of(cmd, env=None):
    r0 = os.times()
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r1 = os.times()
    return (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)


def cpu_rates(a):
    """tokens per CPU second of decoding: muse plain, muse spec, llama plain, llama spec."""
    def muse(n, spec):
        cmd = [a.muse, "run", "-m", a.m, "--input", a.f, "-n", str(n), "-t", str(a.t), "--spec-draft-n-max", str(a.n_max)]
        if a.p_min is not None:
            cmd += ["--spec-draft-p-min", str(a.p_min)]
        return cmd + (["--draft-model", a.md] if spec else [])

    def llama(n, spec):
        if not spec:
            return [os.path.join(a.llama_bin, "llama-completion"), "-m", a.m, "-f", a.f, "-n", str(n), "--temp", "0",
                    "-t", str(a.t), "-no-cnv", "--ignore-eos"]
        cmd = [os.path.join(a.llama_bin, "llama-speculative-simple"), "-m", a.m, "-md", a.md, "--spec-type",
               "draft-dflash", "--spec-draft-n-max", str(a.n_max), "-f", a.f, "-n", str(n), "--temp", "0", "-t", str(a.t)]
        return cmd + (["--spec-draft-p-min", str(a.p_min)] if a.p_min is not None else [])
    out = []
    for make, env in ((muse, None), (llama, LLAMA_ENV)):
        for spec in (False, True):
            short = cpu_of(make(a.short, spec), env)
            long = cpu_of(make(a.n, spec), env)
            out.append((a.n - a.short) / max(long - short, 1e-6))
    return out


def main_cpu(a):
    names = ["muse plain", "muse spec", "llama.cpp plain", "llama.cpp spec"]
    s = {k: [] for k in names}
    for r in range(a.rounds):
        rates = cpu_rates(a)
        for k, v in zip(names, rates):
            s[k].append(v)
        print(f"round {r + 1} (tokens per CPU second): " + ", ".join(f"{k} {v:.2f}" for k, v in zip(names, rates)), flush=True)
    med = {k: statistics.median(v) for k, v in s.items()}
    print("\n| engine | plain t/CPU-s (median) | speculative (median) | spec / plain |")
    print("| --- | ---: | ---: | ---: |")
    for e in ("muse", "llama.cpp"):
        print(f"| {e} | {med[e + ' plain']:.2f} | {med[e + ' spec']:.2f} | {med[e + ' spec'] / med[e + ' plain']:.2f}x |")
    print(f"\nmuse spec / llama.cpp spec: {med['muse spec'] / med['llama.cpp spec']:.2f}x; "
          f"muse plain / llama.cpp plain: {med['muse plain'] / med['llama.cpp plain']:.2f}x")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"cpu_rates": s}, fh, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--muse", default="build/muse")
    ap.add_argument("-m", required=True)
    ap.add_argument("-md", required=True)
    ap.add_argument("-f", required=True)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--n-max", type=int, default=3)
    ap.add_argument("--p-min", type=float, default=None)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--short", type=int, default=32)
    a = ap.parse_args()
    if a.cpu_time:
        return main_cpu(a)
    s = {"muse plain": [], "muse spec": [], "llama.cpp plain": [], "llama.cpp spec": []}
    muse_acc, llama_acc = [], []
    for r in range(a.rounds):
        mp, ms, rec = muse_round(a)
        lp = llama_plain(a)
        ls, ld, la = llama_spec(a)
        s["muse plain"].append(mp)
        s["muse spec"].append(ms)
        s["llama.cpp plain"].append(lp)
        s["llama.cpp spec"].append(ls)
        muse_acc.append((rec["acceptance_rate"], rec["mean_accepted_length"]))
        llama_acc.append(la / ld if ld else 0.0)
        print(f"round {r + 1}: muse {mp:.2f} -> {ms:.2f} t/s, llama.cpp {lp:.2f} -> {ls:.2f} t/s", flush=True)
    med = {k: statistics.median(v) for k, v in s.items()}
    print("\n| engine | plain t/s (median, best) | speculative t/s (median, best) | spec / plain |")
    print("| --- | ---: | ---: | ---: |")
    for e in ("muse", "llama.cpp"):
        p, q = s[f"{e} plain"], s[f"{e} spec"]
        print(f"| {e} | {med[e + ' plain']:.2f}, {max(p):.2f} | {med[e + ' spec']:.2f}, {max(q):.2f} | "
              f"{med[e + ' spec'] / med[e + ' plain']:.2f}x |")
    print(f"\nmuse acceptance {statistics.median(x[0] for x in muse_acc):.1%}, mean accepted length "
          f"{statistics.median(x[1] for x in muse_acc):.2f}; llama.cpp acceptance {statistics.median(llama_acc):.1%}")
    print(f"muse spec / llama.cpp spec: {med['muse spec'] / med['llama.cpp spec']:.2f}x; "
          f"muse spec / muse plain: {med['muse spec'] / med['muse plain']:.2f}x")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"samples": s, "muse_acceptance": muse_acc, "llama_acceptance": llama_acc}, fh, indent=1)


if __name__ == "__main__":
    main()
