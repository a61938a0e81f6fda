#!/usr/bin/env python3
"""server_load.py - load test of `muse serve` (not part of CI): requests/s and p50/p99 latency of
short chat completions at several concurrency levels, and the server's RSS over many requests.

    python3 bench/server_load.py                      # TEST-ONLY scripted engine (HTTP/slot overhead)
    python3 bench/server_load.py --model tiny.gguf    # a real model (forward included)
    python3 bench/server_load.py --url http://127.0.0.1:8080   # an already running server

Traffic goes to 127.0.0.1 only; every loop is bounded by --requests. Standard library only.
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
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[1]


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def one_request(host, port, body, key):
    c = http.client.HTTPConnection(host, port, timeout=120)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
    return dt


def run_level(host, port, clients, n_requests, max_tokens, key):
    """n_requests spread over `clients` threads; returns (req/s, p50 ms, p99 ms, errors)."""
    lat, errors, lock = [], [0], threading.Lock()
    counter = iter(range(n_requests))

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            body = json.dumps({"messages": [{"role": "user", "content": f"short question {i}"}],
                               "max_tokens": max_tokens, "temperature": 0})
            try:
                dt = one_request(host, port, body, key)
                with lock:
                    lat.append(dt)
            except Exception:  # noqa: BLE001 - counted
                with lock:
                    errors[0] += 1
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")  # noqa: E731
    return len(lat) / wall, p(0.50), p(0.99), errors[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an already running server")
    ap.add_argument("--model", help="serve this GGUF instead of the test-only scripted engine")
    ap.add_argument("--levels", default="1,8,64", help="concurrent clients per run")
    ap.add_argument("--requests", type=int, default=400, help="requests per level")
    ap.add_argument("--rss-requests", type=int, default=1000, help="requests of the RSS soak")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=4, help="slots of the server this script starts")
    ap.add_argument("--api-key")
    args = ap.parse_args()

    proc = None
    tmp = tempfile.TemporaryDirectory()
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port
        assert host in ("127.0.0.1", "localhost", "::1"), "load tests target loopback only"
    else:
        muse = os.environ.get("MUSE", str(REPO / "build" / "muse"))
        port_file = pathlib.Path(tmp.name) / "port"
        cmd = [muse, "serve", "--port", "0", "--port-file", str(port_file), "--parallel", str(args.parallel),
               "--queue", "256"]
        if args.model:
            cmd += ["--model", args.model]
        else:
            script = pathlib.Path(tmp.name) / "script.json"
            script.write_text(json.dumps({"model": "muse-test", "n_ctx": 4096}))
            cmd += ["--test-script", str(script)]
        proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        while not port_file.exists() or not port_file.read_text().strip():
            time.sleep(0.02)
        host, port = "127.0.0.1", int(port_file.read_text())
        while True:
            try:
                c = http.client.HTTPConnection(host, port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
    engine = "scripted test engine" if not args.model and not args.url else (args.model or args.url)
    print(f"# muse serve load: {engine}, {args.parallel} slots, max_tokens {args.max_tokens}, "
          f"{args.requests} requests per level")
    print("| clients | req/s | p50 ms | p99 ms | errors |")
    print("|---:|---:|---:|---:|---:|")
    for clients in [int(x) for x in args.levels.split(",")]:
        rps, p50, p99, err = run_level(host, port, clients, args.requests, args.max_tokens, args.api_key)
        print(f"| {clients} | {rps:.1f} | {p50:.1f} | {p99:.1f} | {err} |", flush=True)
    if proc:
        samples = []
        done = 0
        step = max(1, args.rss_requests // 10)
        while done < args.rss_requests:
            run_level(host, port, 8, step, args.max_tokens, args.api_key)
            done += step
            samples.append(rss_kib(proc.pid))
        print(f"\nRSS over {done} requests (KiB, every {step}): {samples}")
        print(f"RSS growth first->last sample: {samples[-1] - samples[0]} KiB; "
              f"median {statistics.median(samples):.0f} KiB")
        proc.terminate()
        proc.wait(timeout=10)
    tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
