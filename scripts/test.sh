#!/usr/bin/env bash
# README command (b): install, build (normal + sanitizer + fuzz + emulated AVX-512), run every test.
# Ends with "N passed, N failed". .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
JOBS=$(nproc 2>/dev/null || echo 2)
timed() {  # timed NAME CMD...: runs it and says how long it took (README's table of costs)
    local name="$1" start; start=$(date +%s); shift
    "$@"
    echo "== $name: $(($(date +%s) - start)) s"
}
# emu512 after all: it takes every object its flags leave unchanged from build/
timed "make all" make -j"$JOBS" all
timed "make emu512" make -j"$JOBS" emu512
timed "make asan" make -j"$JOBS" asan
timed "make fuzz" make -j"$JOBS" fuzz
bash scripts/run-tests.sh
