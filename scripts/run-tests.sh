#!/usr/bin/env bash
# Run every test program, the sanitizer builds of the C tests, the script tests and the fuzzers.
# Each program is one test: exit status 0 = pass. Prints "N passed, N failed" last.
#   FUZZ_SECONDS   seconds per fuzz target (default 20; fuzz_gguf gets 3x, or FUZZ_SECONDS_GGUF)
#   FUZZ_SEED      libFuzzer seed (default 1)
#   MUSE_SHARED    path of ../shared (default: ../shared next to the repository)
set -uo pipefail
cd "$(dirname "$0")/.."
export MUSE_SHARED="${MUSE_SHARED:-$(cd .. && pwd)/shared}"
export MUSE="$PWD/build/muse"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
FUZZ_SEED="${FUZZ_SEED:-1}"  # a fixed seed keeps CI repeatable; vary it (or fuzz longer by hand) to explore
passed=0; failed=0; failures=()
log_dir=build/test-logs; mkdir -p "$log_dir"

run() {  # run NAME TIMEOUT CMD...
    local name="$1" t="$2"; shift 2
    local log="$log_dir/$(echo "$name" | tr '/ ' '__').log"
    local start=$SECONDS
    if timeout "$t" "$@" >"$log" 2>&1; then
        passed=$((passed + 1)); printf 'PASS %-48s %4ss\n' "$name" $((SECONDS - start))
    else
        failed=$((failed + 1)); failures+=("$name")
        printf 'FAIL %-48s %4ss  (log: %s)\n' "$name" $((SECONDS - start)) "$log"
        tail -n 20 "$log" | sed 's/^/    /'
    fi
}

# C test programs: one per tests/**/test_*.c (so stale binaries of deleted tests never run).
c_tests=$(find tests -name 'test_*.c' | sort | sed 's/\.c$//')
for src in $c_tests; do
    run "$src" 600 "build/$src"
done
if [ -d build-asan/tests ]; then
    for src in $c_tests; do
        t="build-asan/$src"
        # sanitizer runs of the slow end-to-end tests are skipped by the tests themselves when
        # MUSE_SANITIZER=1 would make them exceed the budget; they still assert what they run.
        MUSE_SANITIZER=1 run "asan/${t#build-asan/}" 900 "$t"
    done
fi
# The AVX-512 and AMX levels on emulation (make emu512: SIMDe for the AVX-512 intrinsics,
# amx_tiles.h's C model for the tile instructions): their kernels against _ref (the tile GEMM
# within its bound; AMX bit for bit against AVX-512), and the whole forward at MUSE_CPU=avx512
# (with ",exact": identical to --backend ref; the script's scalar variant still runs) and amx.
if [ -x build-emu512/muse ]; then
    run "emu512/tests/kernels/test_kernels_simd" 600 bash -c 'out=$(build-emu512/tests/kernels/test_kernels_simd); st=$?
        echo "$out"; [ $st -eq 0 ] && grep -q "^cpu level: max amx, active amx" <<<"$out"'
    run "emu512/tests/kernels/test_tile_gemm" 600 bash -c 'out=$(build-emu512/tests/kernels/test_tile_gemm); st=$?
        echo "$out"; [ $st -eq 0 ] && grep -q "^avx512: [0-9]* tile GEMM cases" <<<"$out" && grep -q "^amx: [0-9]* tile GEMM cases" <<<"$out"'
    run "emu512/tests/kernels/test_attn_flash" 600 bash -c 'out=$(build-emu512/tests/kernels/test_attn_flash); st=$?
        echo "$out"; [ $st -eq 0 ] && ! grep -q "^SKIP: avx512" <<<"$out"'
    for lv in avx512 amx; do
        sfx=""; [ "$lv" = amx ] && sfx=" (amx)"
        MUSE_CPU=$lv run "emu512/tests/model/test_forward$sfx" 600 build-emu512/tests/model/test_forward
        MUSE_CPU=$lv run "emu512/tests/model/test_tile_forward$sfx" 600 bash -c 'out=$(build-emu512/tests/model/test_tile_forward); st=$?
            echo "$out"; [ $st -eq 0 ] && grep -q "^level $MUSE_CPU" <<<"$out"'
        MUSE="$PWD/build-emu512/muse" MUSE_CPU=$lv run "emu512/tests/model/test_backend_cpu.sh$sfx" 900 bash tests/model/test_backend_cpu.sh
    done
fi
for t in $(find tests -name 'test_*.sh' | sort); do
    run "$t" 900 bash "$t"
done
for t in $(find tests -name 'test_*.py' | sort); do
    run "$t" 900 python3 "$t"
done
if [ -d build-fuzz ]; then
    for src in $(find tests/fuzz -name 'fuzz_*.c' | sort); do
        n=$(basename "$src" .c); f="build-fuzz/$n"
        corpus="build/fuzz-corpus/$n"; mkdir -p "$corpus"
        seeds="tests/fuzz/seeds/${n#fuzz_}"
        seed_args=("$corpus"); [ -d "$seeds" ] && seed_args+=("$seeds")
        [ -x "tests/fuzz/seed_${n#fuzz_}.sh" ] && bash "tests/fuzz/seed_${n#fuzz_}.sh" "$corpus"
        secs="$FUZZ_SECONDS"  # the GGUF parser, the most exposed one, gets about a minute
        [ "$n" = fuzz_gguf ] && secs="${FUZZ_SECONDS_GGUF:-$((FUZZ_SECONDS * 3))}"
        run "fuzz/$n (${secs}s)" $((secs + 120)) "$f" -max_total_time="$secs" \
            -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -seed="$FUZZ_SEED" "${seed_args[@]}"
    done
fi
echo
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
