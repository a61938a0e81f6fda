#!/usr/bin/env bash
# README command (b): install, build (normal + sanitizer + fuzz + emulated AVX-512), run every test.
# Ends with "N passed, N failed". .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
JOBS=$(nproc 2>/dev/null || echo 2)
make -j"$JOBS" all
make -j"$JOBS" asan
make -j"$JOBS" fuzz
make -j"$JOBS" emu512
bash scripts/run-tests.sh
