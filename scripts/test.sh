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
# emu512 after all: it takes every object its flags leave unchanged from build/. emu512, asan and
# fuzz are independent (their own directories), so one make builds them together: the long
# single-file compiles at the end of one (SIMDe's gemm_tiles_avx512.c: minutes) overlap the others.
timed "make all" make -j"$JOBS" all
timed "make emu512 asan fuzz" make -j"$JOBS" emu512 asan fuzz
bash scripts/run-tests.sh
