#!/usr/bin/env bash
# Run every test program, the sanitizer builds of the C tests, the script tests and the fuzzers.
# Each program is one test: exit status 0 = pass. Prints "N passed, N failed" last.
#   FUZZ_SECONDS   seconds for every fuzz target (default: each target's own, see fuzz_seconds:
#                  10, fuzz_gguf 15, fuzz_kld_base 5)
#   FUZZ_SEED      libFuzzer seed (default 1)
#   MUSE_SHARED    path of ../shared (default: ../shared next to the repository)
#   TESTS          an extended regex: only the tests whose name matches run (default: all)
#   TEST_JOBS      tests run at once (default: the number of CPUs, at least 2). The tests are
#                  independent: temporary files carry the pid or come from mkdtemp/mktemp, servers
#                  listen on a free port (--port 0), each fuzzer has its own corpus. The longest
#                  start first (scripts/test-durations.txt); results are printed in the order below
#                  whatever order they run in.
set -uo pipefail
cd "$(dirname "$0")/.."
export MUSE_SHARED="${MUSE_SHARED:-$(cd .. && pwd)/shared}"
export MUSE="$PWD/build/muse"
FUZZ_SEED="${FUZZ_SEED:-1}"  # a fixed seed keeps CI repeatable; vary it (or fuzz longer by hand) to explore
TEST_JOBS="${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "$TEST_JOBS" -ge 2 ] 2>/dev/null || TEST_JOBS=2
log_dir=build/test-logs; mkdir -p "$log_dir"
rm -f "$log_dir"/*.status

# The list: add [--no-cli] NAME TIMEOUT CMD... (CMD is run by `timeout`; `env VAR=...` for
# variables). --no-cli: the test does not run build/muse (see test_install.sh below).
names=(); limits=(); cmds=(); no_cli=()
add() {
    local nc=0; [ "$1" = --no-cli ] && { nc=1; shift; }
    [ -n "${TESTS:-}" ] && ! grep -qE -- "$TESTS" <<<"$1" && return
    names+=("$1"); limits+=("$2"); shift 2
    cmds+=("$(printf '%q ' "$@")"); no_cli+=("$nc")
}

# C test programs: one per tests/**/test_*.c (so stale binaries of deleted tests never run).
c_tests=$(find tests -name 'test_*.c' | sort | sed 's/\.c$//')
for src in $c_tests; do
    add --no-cli "$src" 600 "build/$src"
done
# The AVX-512 level without VBMI (Cascade Lake's paths: the gathered grids) where this CPU has VBMI
add --no-cli "tests/kernels/test_kernels_simd (novbmi)" 600 env MUSE_CPU=novbmi build/tests/kernels/test_kernels_simd
# The sanitizer build (ASan + UBSan, make asan) of the C tests in the Makefile's ASAN_TESTS (all
# of them but ASAN_SKIP, each skip with its reason there). Sanitizer runs of slow tests are
# trimmed by the tests themselves when MUSE_SANITIZER=1 would make them exceed the budget; they
# still assert what they run.
if [ -d build-asan/tests ]; then
    for t in $(make -s --no-print-directory print-asan-tests); do
        add --no-cli "asan/$t" 900 env MUSE_SANITIZER=1 "build-asan/$t"
    done
fi
# The AVX-512 and AMX levels on emulation (make emu512: SIMDe for the AVX-512 intrinsics,
# amx_tiles.h's C model for the tile instructions): their kernels against _ref (the tile GEMM
# within its bound; AMX bit for bit against AVX-512), and the whole forward at MUSE_CPU=avx512
# (with ",exact": identical to --backend ref; the script's scalar variant still runs) and amx.
if [ -x build-emu512/muse ]; then
    add --no-cli "emu512/tests/kernels/test_kernels_simd" 600 bash -c 'out=$(build-emu512/tests/kernels/test_kernels_simd); st=$?
        echo "$out"; [ $st -eq 0 ] && grep -q "^cpu level: max amx, active avx512" <<<"$out"'
    add --no-cli "emu512/tests/kernels/test_tile_gemm" 600 bash -c 'out=$(build-emu512/tests/kernels/test_tile_gemm); st=$?
        echo "$out"; [ $st -eq 0 ] && grep -q "^avx512: [0-9]* tile GEMM cases" <<<"$out" && grep -q "^amx: [0-9]* tile GEMM cases" <<<"$out"'
    add --no-cli "emu512/tests/kernels/test_attn_flash" 600 bash -c 'out=$(build-emu512/tests/kernels/test_attn_flash); st=$?
        echo "$out"; [ $st -eq 0 ] && ! grep -q "^SKIP: avx512" <<<"$out"'
    for lv in avx512 amx; do
        sfx=""; [ "$lv" = amx ] && sfx=" (amx)"
        add --no-cli "emu512/tests/model/test_forward$sfx" 600 env MUSE_CPU=$lv build-emu512/tests/model/test_forward
        add --no-cli "emu512/tests/model/test_tile_forward$sfx" 600 env MUSE_CPU=$lv bash -c 'out=$(build-emu512/tests/model/test_tile_forward); st=$?
            echo "$out"; [ $st -eq 0 ] && grep -q "^level $MUSE_CPU" <<<"$out"'
        # the whole-model script at avx512 only: at amx it repeated the avx512 run but for the tile
        # GEMM's kernel, which test_tile_forward (amx) checks op by op (47 s of the CI budget)
        [ "$lv" = avx512 ] && add "emu512/tests/model/test_backend_cpu.sh" 900 env MUSE="$PWD/build-emu512/muse" MUSE_CPU=$lv bash tests/model/test_backend_cpu.sh
    done
fi
for t in $(find tests -name 'test_*.sh' | sort); do
    add "$t" 900 bash "$t"
done
for t in $(find tests -name 'test_*.py' | sort); do
    add "$t" 900 python3 "$t"
done
# Seconds per fuzz target. CI starts each from its seeds (and what a previous run left in
# build/fuzz-corpus) with a fixed seed: a regression smoke over the seeds and the corpus, not a
# search (fuzz longer by hand: FUZZ_SECONDS=300). Halved in session 16 to keep the test command
# within its 20 minutes as the suite grew (Vulkan, tensor parallelism): 10 s each, fuzz_gguf 15
# (its seeds already reach the parser), fuzz_kld_base 5 (all its edges within its first second).
fuzz_seconds() {
    if [ -n "${FUZZ_SECONDS:-}" ]; then echo "$FUZZ_SECONDS"; return; fi
    case "$1" in
        fuzz_gguf) echo 15 ;;
        fuzz_kld_base) echo 5 ;;
        *) echo 10 ;;
    esac
}
if [ -d build-fuzz ]; then
    for src in $(find tests/fuzz -name 'fuzz_*.c' | sort); do
        n=$(basename "$src" .c); secs=$(fuzz_seconds "$n")
        corpus="build/fuzz-corpus/$n"; mkdir -p "$corpus"
        seeds="tests/fuzz/seeds/${n#fuzz_}"
        seed_args=("$corpus"); [ -d "$seeds" ] && seed_args+=("$seeds")
        fuzz=("build-fuzz/$n" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
              -seed="$FUZZ_SEED" "${seed_args[@]}")
        seed="tests/fuzz/seed_${n#fuzz_}.sh"
        if [ -x "$seed" ]; then  # seed scripts write files with build/muse (synth) first
            add "fuzz/$n (${secs}s)" $((secs + 180)) bash -c 'bash "$1" "$2"; shift 2; exec "$@"' - \
                "$seed" "$corpus" "${fuzz[@]}"
        else
            add --no-cli "fuzz/$n (${secs}s)" $((secs + 120)) "${fuzz[@]}"
        fi
    done
fi

# Start order: test_install.sh first, then the longest first by scripts/test-durations.txt
# (seconds of a recent run, 2 at once on the 2-core CI box; a test not listed counts 10 s),
# so that no long test starts last while the other CPU idles. test_install.sh's `make install`
# relinks build/muse when the commit changed since the build (a -dirty tree), so while it runs
# only --no-cli tests start (a test running that binary at that moment failed with 'Permission
# denied').
declare -A est
if [ -f scripts/test-durations.txt ]; then
    while read -r secs name; do [ -n "$name" ] && est["$name"]=$secs; done < <(grep -v '^#' scripts/test-durations.txt)
fi
order=()
while read -r _ i; do order+=("$i"); done < <(
    for i in "${!names[@]}"; do
        e=${est["${names[$i]}"]:-10}
        [[ "${names[$i]}" =~ ^fuzz/.*\(([0-9]+)s\)$ ]] && e=${est["${names[$i]}"]:-${BASH_REMATCH[1]}}
        [ "${names[$i]}" = tests/tools/test_install.sh ] && e=1000000
        echo "$e $i"
    done | sort -k1,1nr -k2,2n -s)

log_of() { echo "$log_dir/$(echo "${names[$1]}" | tr '/ ' '__').log"; }
passed=0; failed=0; failures=(); reported=0
report() {  # print the finished tests at the head of the list
    while [ "$reported" -lt ${#names[@]} ]; do
        local name="${names[$reported]}" log st secs
        log=$(log_of "$reported")
        [ -s "$log.status" ] || break
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
start() {  # start test $1 in the background
    local i="$1" log; log=$(log_of "$i")
    (
        t0=$(date +%s)
        eval "timeout ${limits[$i]} ${cmds[$i]}" >"$log" 2>&1
        st=$?
        echo "$st $(($(date +%s) - t0))" > "$log.status.tmp" && mv "$log.status.tmp" "$log.status"
    ) &
}

t_begin=$(date +%s)
install_log=""
while [ ${#order[@]} -gt 0 ]; do
    while [ "$(jobs -rp | wc -l)" -ge "$TEST_JOBS" ]; do wait -n; report; done
    installing=0; [ -n "$install_log" ] && [ ! -s "$install_log.status" ] && installing=1
    pick=-1
    for k in "${!order[@]}"; do
        i=${order[$k]}
        if [ "$installing" -eq 0 ] || [ "${no_cli[$i]}" -eq 1 ]; then pick=$k; break; fi
    done
    if [ "$pick" -lt 0 ]; then wait -n; report; continue; fi
    i=${order[$pick]}; unset 'order[pick]'; order=("${order[@]}")
    [ "${names[$i]}" = tests/tools/test_install.sh ] && install_log=$(log_of "$i")
    start "$i"
    report
done
wait
report
# This run's times, longest first, in the form of scripts/test-durations.txt (copy it there
# when the tests changed much).
for i in "${!names[@]}"; do
    [ -s "$(log_of "$i").status" ] && echo "$(cut -d' ' -f2 "$(log_of "$i").status") ${names[$i]}"
done | sort -k1,1nr > "$log_dir/durations.txt"
echo
echo "($TEST_JOBS at once: $(($(date +%s) - t_begin)) s)"
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
