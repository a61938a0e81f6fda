# muse - a thin Makefile. `make` builds everything (CLI at build/muse); `make test` runs all tests.
#
# Variants (each its own build directory, so they never mix objects):
#   make                 release-ish build (-O2 -g) in build/
#   make asan            ASan + UBSan build in build-asan/: the unit and parser tests run under it
#   make fuzz            libFuzzer targets (clang) in build-fuzz/: tests/fuzz/fuzz_*.c
#   make emu512          the AVX-512 kernels on SIMDe's emulation, in build-emu512/ (tests only)
#   make test            build + asan + fuzz + emu512, then scripts/run-tests.sh (ends with "N passed, N failed")
#
# Sources are found by directory, so adding a file never needs a Makefile edit:
#   src/**.c             -> libmuse.a   (files named *_avx2.c / *_avx512.c get their ISA flags;
#                                        nothing else is compiled with -m flags, never -march=native)
#   tools/*.c            -> build/muse  (the CLI)
#   tests/**/test_*.c    -> build/tests/<dir>/test_*   (each a program; exit status = verdict)
#   bench/*.c            -> build/bench/*
#   tests/fuzz/fuzz_*.c  -> build-fuzz/fuzz_*

CC      ?= cc
# Quiet by default ("CC file"); `make V=1` shows the full commands.
Q       := $(if $(V),,@)
BUILD   ?= build
OPT     ?= -O2 -g
SAN     ?=
PKGS    := libpcre2-8 libcjson libmicrohttpd

WARN    := -Wall -Wextra -Werror -Wpointer-arith -Wno-unused-parameter
# -ffp-contract=off: the reference dequantizers and the forward must not fuse a*b+c (bit-exactness
# with ggml, see gguf-and-quants.md). SIMD kernels use explicit FMA intrinsics where they want them.
CFLAGS  := -std=c11 $(WARN) $(OPT) $(SAN) -ffp-contract=off -D_GNU_SOURCE -fno-strict-aliasing \
           -Iinclude -Isrc -Itests $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -MMD -MP
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lpcre2-8 -lcjson -lmicrohttpd) -lpthread -lm

ISA_AVX2   := -mavx2 -mfma -mf16c -mbmi2
ISA_AVX512 := -mavx2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -mbmi2

LIB_SRC   := $(shell find src -name '*.c' | sort)
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(shell find tests -name 'test_*.c' | sort)
BENCH_SRC := $(sort $(wildcard bench/*.c))
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN  := $(TEST_SRC:%.c=$(BUILD)/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIB       := $(BUILD)/libmuse.a

.PHONY: all asan fuzz emu512 test clean format
all: $(BUILD)/muse $(TEST_BIN) $(BENCH_BIN)

# ISA_SAN: the sanitizer flags of the SIMD kernel files (the fuzz build leaves them out: the
# fuzzers do not reach the kernels, and clang's ASan + coverage build of them took minutes each;
# the asan build keeps them, and test_kernels_simd runs there).
ISA_SAN ?= $(SAN)
ISA_CFLAGS = $(filter-out $(SAN),$(CFLAGS)) $(ISA_SAN)

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	@echo "CC $<"
	$(Q)$(CC) $(ISA_CFLAGS) $(ISA_AVX2) -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	@echo "CC $<"
	$(Q)$(CC) $(ISA_CFLAGS) $(ISA_AVX512) -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "CC $<"
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/muse: $(TOOL_OBJ) $(LIB)
	@echo "LD $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(TOOL_OBJ) $(LIB) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIB)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# ASan + UBSan: catches out-of-bounds reads in parsers and undefined shifts in kernels.
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"

# libFuzzer: every library object is built with coverage + ASan; each target links its own main.
FUZZ_CFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT="-O1 -g" SAN="$(FUZZ_CFLAGS)" ISA_SAN= build-fuzz/libmuse.a
	@mkdir -p build-fuzz
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  echo "clang $$f -> build-fuzz/$$n"; \
	  clang -std=c11 $(WARN) -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -Itests $(shell pkg-config --cflags $(PKGS) 2>/dev/null) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    $$f build-fuzz/libmuse.a $(LDLIBS) -o build-fuzz/$$n || exit 1; done

# AVX-512 without an AVX-512 CPU: the *_avx512.c kernels built with the AVX2 flags and SIMDe's
# emulation of the AVX-512 intrinsics (libsimde-dev), the CPU check told to count AVX2 as AVX-512
# VNNI. Slow; for the tests only (the kernel tests, test_forward and cpu == ref at MUSE_CPU=avx512).
emu512:
	$(MAKE) BUILD=build-emu512 ISA_AVX512="$(ISA_AVX2) -DMUSE_EMULATE_AVX512" SAN="-DMUSE_CPU_EMULATE_AVX512" \
	    build-emu512/muse build-emu512/tests/kernels/test_kernels_simd build-emu512/tests/kernels/test_tile_gemm \
	    build-emu512/tests/model/test_forward build-emu512/tests/model/test_tile_forward

test: all asan fuzz emu512
	bash scripts/run-tests.sh

clean:
	rm -rf build build-asan build-fuzz build-emu512

format:
	clang-format -i $(LIB_SRC) $(TOOL_SRC) $(TEST_SRC) $(BENCH_SRC) $(FUZZ_SRC) $(shell find include src tests tools bench -name '*.h')

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
