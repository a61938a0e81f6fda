#!/usr/bin/env bash
# Tensor parallelism between two hosts, on one box (docs/tensor-parallel.md, "Two machines"): two
# network namespaces joined by a veth pair, OpenMPI over TCP between them (its remote shell is a
# script that runs `ip netns exec`), rank 0 in one namespace and rank 1 in the other:
#   - greedy 32 tokens of the trained model identical to --tp 1;
#   - the link going down mid-generation (a node that vanishes) ends both ranks with an error
#     line within MUSE_TP_TIMEOUT (3 s here) + a few seconds, never a hang.
# Needs root (ip netns); a box where namespaces cannot be made fails the test.
set -uo pipefail
MUSE="${MUSE:-build/muse}"
MUSE=$(cd "$(dirname "$MUSE")" && pwd)/$(basename "$MUSE")
MODEL=$PWD/models/glimmer-tiny-f16.gguf
A=muse-a-$$ B=muse-b-$$ VA=mva$$ VB=mvb$$
NET=10.$((($$ % 200) + 20)).77
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
cleanup() {
    pkill -9 -f "$tmp/" 2>/dev/null
    ip netns pids "$A" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns pids "$B" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

command -v mpirun >/dev/null || { echo "FAIL: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"; exit 1; }
if ! { ip netns add "$A" && ip netns add "$B" && ip link add "$VA" type veth peer name "$VB" &&
       ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" &&
       ip -n "$A" addr add "$NET.1/24" dev "$VA" && ip -n "$B" addr add "$NET.2/24" dev "$VB" &&
       ip -n "$A" link set "$VA" up && ip -n "$B" link set "$VB" up &&
       ip -n "$A" link set lo up && ip -n "$B" link set lo up; } 2> "$tmp/ip.err"; then
    echo "FAIL: cannot make two network namespaces (needs root and iproute2): $(cat "$tmp/ip.err")"; exit 1
fi
# the launcher's remote shell: "host" $NET.2 is namespace B, anything else A
cat > "$tmp/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in $NET.2) ns=$B ;; *) ns=$A ;; esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"
# each "host" has one slot: without mpi_yield_when_idle the two ranks would spin against each
# other on this box's cores (real hosts do not share cores)
MPI=(ip netns exec "$A" mpirun --host "$NET.1,$NET.2" -np 2 --mca plm_rsh_agent "$tmp/agent.sh" --mca btl tcp,self
     --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" --mca mpi_yield_when_idle 1)

"$MUSE" run -m "$MODEL" -p "To be, or not to be" -n 32 --temp 0 -t 1 > "$tmp/run1" 2>/dev/null
if timeout 120 "${MPI[@]}" "$MUSE" run -m "$MODEL" -p "To be, or not to be" -n 32 --temp 0 -t 1 --tp 2 > "$tmp/run2" 2> "$tmp/err2" < /dev/null &&
   cmp -s "$tmp/run1" "$tmp/run2"; then
    ok "two hosts over TCP: greedy 32 tokens identical to --tp 1 ($(grep -o 'generated.*tok/s)' "$tmp/err2"))"
else bad "two hosts: $(cat "$tmp/run2") / $(tail -5 "$tmp/err2")"; fi

# the link goes down mid-generation
MUSE_TP_TIMEOUT=3 "${MPI[@]}" -x MUSE_TP_TIMEOUT "$MUSE" run -m "$MODEL" -p "Once" -n 200000 --ignore-eos -c 65536 --temp 0 -t 1 --tp 2 \
    > /dev/null 2> "$tmp/vanish.err" < /dev/null &
job=$!
sleep 3
ranks() { pgrep -f -- "^$MUSE run -m $MODEL -p Once" | wc -l; }
if [ "$(ranks)" -ne 2 ]; then bad "vanish test: the two ranks are not running ($(ranks)): $(tail -3 "$tmp/vanish.err")"
else
    t0=$(date +%s.%N)
    ip -n "$B" link set "$VB" down
    for _ in $(seq 200); do [ "$(ranks)" -eq 0 ] && break; sleep 0.1; done
    dt=$(python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.1f}')" "$(date +%s.%N)" "$t0")
    if [ "$(ranks)" -eq 0 ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 10 else 1)" "$dt" &&
       grep -q "no answer from the other ranks" "$tmp/vanish.err"; then
        ok "vanish test: link down, both ranks ended in $dt s: $(grep -m1 "no answer" "$tmp/vanish.err")"
    else bad "vanish test: $(ranks) ranks left after $dt s: $(tail -5 "$tmp/vanish.err")"; fi
fi
{ kill -9 "$job"; wait "$job"; } 2>/dev/null  # the launcher itself may wait on the lost host's daemon

echo "test_tp_netns: $fail failed"
[ "$fail" -eq 0 ]
