#!/usr/bin/env python3
"""server_batch.py - continuous batching in `muse serve` (issue 29; not part of CI).

For each server mode (batched: --parallel N; unbatched: --parallel N -nocb):
  1. aggregate decode: one streaming client alone, then N at once, each generating --tokens tokens
     (ignore_eos) after a short prompt; tokens of all clients per second of wall time;
  2. time to first token of two short requests sent at once on an idle server, and of two such
     requests while a long prompt (--long tokens, a new one each round) prefills on another slot.

    python3 bench/server_batch.py --model FILE.gguf [--parallel 8] [--tokens 64] [--long 4096] [-t 2]
                                  [--serve-args "--prefill-step 16"]

Loopback only; the standard library only. Prints one markdown table per mode and the commands.
"""
import argparse
import http.client
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def stream(port, body, out):
    """POST /completion streaming; out gets t_first (s), n tokens, t_end."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/completion", json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    r = c.getresponse()
    n, first = 0, None
    for line in r:
        if not line.startswith(b"data: "):
            continue
        ev = json.loads(line[6:])
        if ev.get("content") or ev.get("tokens"):
            n += 1
            if first is None:
                first = time.perf_counter() - t0
        if ev.get("stop"):
            break
    out.update(t_first=first if first is not None else time.perf_counter() - t0, n=n, t_end=time.perf_counter() - t0)
    c.close()


def serve(model, args, extra):
    d = tempfile.mkdtemp(prefix="muse-bb-")
    pf = os.path.join(d, "port")
    log = open(os.path.join(d, "log"), "w")
    p = subprocess.Popen([args.muse, "serve", "--model", model, "--port", "0", "--port-file", pf, "-t", str(args.threads),
                          "-c", str(args.ctx), "--parallel", str(args.parallel), "--queue", "64", *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(pf) and open(pf).read().strip():
            break
        time.sleep(0.1)
    port = int(open(pf).read())
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    return p, port


def at_once(port, bodies):
    outs = [{} for _ in bodies]
    th = [threading.Thread(target=stream, args=(port, b, o)) for b, o in zip(bodies, outs)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return outs, time.perf_counter() - t0


def measure(model, args, extra):
    p, port = serve(model, args, extra)
    try:
        gen = {"n_predict": args.tokens, "ignore_eos": True, "temperature": 0, "cache_prompt": False}
        stream(port, dict(gen, prompt="warm up", n_predict=4), {})
        one, n_many, ttft_idle, ttft_busy = [], [], [], []
        for rep in range(args.reps):
            outs, dt = at_once(port, [dict(gen, prompt=f"Client alone {rep}: tell me a story")])
            one.append(outs[0]["n"] / dt)
            outs, dt = at_once(port, [dict(gen, prompt=f"Client {k} of many {rep}: a story") for k in range(args.parallel)])
            n_many.append(sum(o["n"] for o in outs) / dt)
            # the same two short requests (the same lengths) on the idle server, then while a long
            # prompt prefills on another slot (a new one each round: a slot's prompt cache would
            # otherwise serve it at once)
            outs, _ = at_once(port, [dict(gen, prompt=f"Short {rep} idle {k}", n_predict=2) for k in range(2)])
            ttft_idle.append(statistics.median(o["t_first"] for o in outs))
            longb = dict(gen, prompt=[1 + (i * 7919 + rep * 101) % 3000 for i in range(args.long)], n_predict=2)
            lo = {}
            lt = threading.Thread(target=stream, args=(port, longb, lo))
            lt.start()
            time.sleep(0.3)
            outs, _ = at_once(port, [dict(gen, prompt=f"Short {rep} busy {k}", n_predict=2) for k in range(2)])
            ttft_busy.append(statistics.median(o["t_first"] for o in outs))
            lt.join()
        return {"one": statistics.median(one), "many": statistics.median(n_many),
                "ttft_idle": statistics.median(ttft_idle), "ttft_busy": statistics.median(ttft_busy)}
    finally:
        p.terminate()
        p.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--muse", default=str(REPO / "build" / "muse"))
    ap.add_argument("--serve-args", default="", help="more `muse serve` options for the batched mode (e.g. --prefill-step 16)")
    args = ap.parse_args()
    print(f"model {args.model}, --parallel {args.parallel}, {args.tokens} tokens per client, long prompt {args.long}, "
          f"-t {args.threads}, median of {args.reps}")
    print("| mode | 1 client tok/s | %d clients tok/s | x | TTFT idle ms | TTFT during long prefill ms | x |" % args.parallel)
    print("|---|---|---|---|---|---|---|")
    # alternate the modes so drift hits both
    res = {"batched": [], "-nocb": []}
    for _ in range(1):
        for mode, extra in (("batched", args.serve_args.split()), ("-nocb", ["-nocb"])):
            res[mode].append(measure(args.model, args, extra))
    for mode, rs in res.items():
        r = rs[0]
        print(f"| {mode} | {r['one']:.1f} | {r['many']:.1f} | {r['many'] / r['one']:.2f}x | {r['ttft_idle'] * 1e3:.0f} | "
              f"{r['ttft_busy'] * 1e3:.0f} | {r['ttft_busy'] / r['ttft_idle']:.2f}x |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
