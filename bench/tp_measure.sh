#!/usr/bin/env bash
# Tensor parallelism on one box (docs/perf.md "Tensor parallelism"): per-rank peak RSS at tp 1/2/4,
# decode and prefill at --tp 2 with 1 thread per rank against --tp 1 with 2 threads (alternating
# rounds, medians), and rank 0's all-reduce counters (bytes, microseconds each).
#   bash bench/tp_measure.sh [MODEL] [ROUNDS]     (default: the 30B preset, made if missing; 3 rounds)
set -euo pipefail
MUSE=${MUSE:-build/muse}
MODEL=${1:-/tmp/tp30/m30b.gguf}
ROUNDS=${2:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe --bind-to none)
[ -f "$MODEL" ] || { mkdir -p "$(dirname "$MODEL")"; "$MUSE" synth --preset 30b -o "$MODEL"; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; model: $MODEL ($(du -h "$MODEL" | cut -f1))"

echo "## peak RSS per rank (load + 4 prompt + 4 generated tokens, -c 512)"
for n in 1 2 4; do
    if [ "$n" = 1 ]; then out=$(/usr/bin/time -f "RSS %M" "$MUSE" run -m "$MODEL" -p Hello -n 4 -t 1 -c 512 2>&1 < /dev/null)
    else out=$("${MPI[@]}" -np $n /usr/bin/time -f "RSS %M" "$MUSE" run -m "$MODEL" -p Hello -n 4 -t 1 -c 512 --tp $n 2>&1 < /dev/null); fi
    echo "tp $n: $(grep -o 'RSS [0-9]*' <<<"$out" | awk '{printf "%.2f GiB  ", $2 / 1048576}')"
done

echo "## speed: tp 1 with 2 threads vs tp 2 with 1 thread per rank (pp16, tg8; $ROUNDS alternating rounds)"
for r in $(seq "$ROUNDS"); do
    "$MUSE" bench -m "$MODEL" -p 16 -n 8 -r 1 -t 2 -o jsonl < /dev/null 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l); print("tp1", d["n_prompt"], d["n_gen"], d["avg_ts"])' >> /tmp/tp_measure.$$
    "${MPI[@]}" -np 2 "$MUSE" bench -m "$MODEL" -p 16 -n 8 -r 1 -t 1 --tp 2 -o jsonl < /dev/null 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l); print("tp2", d["n_prompt"], d["n_gen"], d["avg_ts"], d.get("tp_allreduce_us", 0), d.get("tp_allreduce_bytes_sent", 0))' >> /tmp/tp_measure.$$
done
python3 - /tmp/tp_measure.$$ <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(tp, pp):
    v = [float(r[3]) for r in rows if r[0] == tp and (int(r[1]) > 0) == pp]
    return statistics.median(v) if v else float("nan")
for name, pp in (("pp16", True), ("tg8", False)):
    a, b = med("tp1", pp), med("tp2", pp)
    print(f"{name}: tp 1 (2 threads) {a:.2f} t/s, tp 2 (1 thread each) {b:.2f} t/s, ratio {b / a:.2f}")
us = [float(r[4]) for r in rows if r[0] == "tp2"]
by = [float(r[5]) for r in rows if r[0] == "tp2"]
if us:
    print(f"all-reduce (rank 0, whole bench): {statistics.median(us):.0f} us each, {statistics.median(by) / 1024:.1f} KiB sent each")
PY
rm -f /tmp/tp_measure.$$
