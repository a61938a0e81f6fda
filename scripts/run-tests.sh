#!/usr/bin/env bash
# Run every test program, the sanitizer builds of the C tests, the script tests and the fuzzers.
# Each program is one test: exit status 0 = pass. Prints "N passed, N failed" last.
#   FUZZ_SECONDS   seconds per fuzz target (default 20; fuzz_gguf gets 3x, or FUZZ_SECONDS_GGUF)
#   FUZZ_SEED      libFuzzer seed (default 1)
#   MUSE_SHARED    path of ../shared (default: ../shared next to the repository)
#   TEST_JOBS      tests run at once (default: the number of CPUs, at least 2). The tests are
#                  independent: temporary files carry the pid or come from mkdtemp/mktemp, servers
#                  listen on a free port (--port 0), each fuzzer has its own corpus. Results are
#                  printed in the order below whatever order they finish in.
set -uo pipefail
cd "$(dirname "$0")/.."
export MUSE_SHARED="${MUSE_SHARED:-$(cd .. && pwd)/shared}"
export MUSE="$PWD/build/muse"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
FUZZ_SEED="${FUZZ_SEED:-1}"  # a fixed seed keeps CI repeatable; vary it (or fuzz longer by hand) to explore
TEST_JOBS="${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "$TEST_JOBS" -ge 2 ] 2>/dev/null || TEST_JOBS=2
passed=0; failed=0; failures=()
log_dir=build/test-logs; mkdir -p "$log_dir"
rm -f "$log_dir"/*.status
t_begin=$(date +%s)
names=(); logs=(); reported=0  # the started tests, in order; the first `reported` are printed

report() {  # print the finished tests at the head of the order
    while [ "$reported" -lt ${#names[@]} ] && [ -s "${logs[$reported]}.status" ]; do
        local name="${names[$reported]}" log="${logs[$reported]}" st secs
        read -r st secs < "$log.status"
        if [ "$st" -eq 0 ]; then
            passed=$((passed + 1)); printf 'PASS %-48s %4ss\n' "$name" "$secs"
        else
            failed=$((failed + 1)); failures+=("$name")
            printf 'FAIL %-48s %4ss  (log: %s)\n' "$name" "$secs" "$log"
            tail -n 20 "$log" | sed 's/^/    /'
        fi
        reported=$((reported + 1))
    done
}

run() {  # run NAME TIMEOUT CMD...: started as soon as fewer than TEST_JOBS tests run
    local name="$1" t="$2"; shift 2
    local log="$log_dir/$(echo "$name" | tr '/ ' '__').log"
    while [ "$(jobs -rp | wc -l)" -ge "$TEST_JOBS" ]; do wait -n; report; done
    names+=("$name"); logs+=("$log")
    (
        start=$(date +%s)
        timeout "$t" "$@" >"$log" 2>&1
        st=$?
        echo "$st $(($(date +%s) - start))" > "$log.status.tmp" && mv "$log.status.tmp" "$log.status"
    ) &
    report
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
    if [ "$t" = tests/tools/test_install.sh ]; then
        # alone: its `make install` relinks build/muse when the commit changed since the build
        # (a -dirty tree), and the other tests run that binary
        wait; report
        run "$t" 900 bash "$t"
        wait; report
    else
        run "$t" 900 bash "$t"
    fi
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
wait
report
echo
echo "($TEST_JOBS at once: $(($(date +%s) - t_begin)) s)"
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
