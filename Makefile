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
#   src/**.c             -> libmuse.a   (files named *_avx2.c / *_avx512.c / *_amx.c get their ISA flags;
#                                        nothing else is compiled with -m flags, never -march=native)
#   tools/*.c            -> build/muse  (the CLI)
#   tests/**/test_*.c    -> build/tests/<dir>/test_*   (each a program; exit status = verdict)
#   bench/*.c            -> build/bench/*
#   tests/fuzz/fuzz_*.c  -> build-fuzz/fuzz_*
#   (the library objects are position-independent, so libmuse.so links the same ones)
#   src/backend/vulkan/shaders/*.comp -> $(BUILD)/gen/spv/*.spv (glslc, checked by spirv-val) ->
#                        $(BUILD)/gen/muse_vk_shaders.h (embedded); src/backend/vulkan/ is built
#                        only when `pkg-config vulkan` and glslc are there (VULKAN=0 leaves it out)
# `make install PREFIX=...` / `make uninstall`: see the install target.

CC      ?= cc
# Quiet by default ("CC file"); `make V=1` shows the full commands.
Q       := $(if $(V),,@)
BUILD   ?= build
OPT     ?= -O2 -g
SAN     ?=
# LIB_PKGS: what libmuse needs (the .so and muse.pc); libedit is the CLI's (muse chat's line editor)
LIB_PKGS := libpcre2-8 libcjson libmicrohttpd stb libwebp
PKGS    := $(LIB_PKGS) libedit

WARN    := -Wall -Wextra -Werror -Wpointer-arith -Wno-unused-parameter
# -ffp-contract=off: the reference dequantizers and the forward must not fuse a*b+c (bit-exactness
# with ggml, see gguf-and-quants.md). SIMD kernels use explicit FMA intrinsics where they want them.
CFLAGS  := -std=c11 $(WARN) $(OPT) $(SAN) -ffp-contract=off -D_GNU_SOURCE -fno-strict-aliasing \
           -Iinclude -Isrc -Itests -I$(BUILD)/gen $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -MMD -MP
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lpcre2-8 -lcjson -lmicrohttpd -lstb -lwebp -ledit) -lpthread -lm
LIB_LDLIBS := $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null || echo -lpcre2-8 -lcjson -lmicrohttpd -lstb -lwebp) -lpthread -lm

ISA_AVX2   := -mavx2 -mfma -mf16c -mbmi2
ISA_AVX512 := -mavx2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -mbmi2
ISA_AMX    := $(ISA_AVX512) -mamx-tile -mamx-int8

# Tensor parallelism over MPI (src/backend/tp/comm_mpi.c, docs/tensor-parallel.md): built with MPI
# when mpicc is there (Debian's libopenmpi-dev); without it --tp answers with one line.
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
ifneq ($(MPI_LIBS),)
LDLIBS     += $(MPI_LIBS)
LIB_LDLIBS += $(MPI_LIBS)
endif

LIB_SRC   := $(shell find src -name '*.c' | sort)
# The Vulkan device (docs/vulkan.md): its headers and glslc at build time; the loader is opened at
# run time (dlopen), so the binary starts without it. Without them, --backend vulkan says so.
GLSLC   ?= glslc
VULKAN  ?= $(shell pkg-config --exists vulkan 2>/dev/null && command -v $(GLSLC) >/dev/null 2>&1 && echo 1 || echo 0)
VK_DIR  := src/backend/vulkan
ifeq ($(VULKAN),1)
CFLAGS  += -DMUSE_HAVE_VULKAN $(shell pkg-config --cflags vulkan)
else
LIB_SRC := $(filter-out $(VK_DIR)/%,$(LIB_SRC))
endif
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(shell find tests -name 'test_*.c' | sort)
BENCH_SRC := $(sort $(wildcard bench/*.c))
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN  := $(TEST_SRC:%.c=$(BUILD)/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIB       := $(BUILD)/libmuse.a
# The shared library: the same objects as libmuse.a (see LIB_PIC).
SOLIB     := $(BUILD)/libmuse.so
SONAME    := libmuse.so.0
VERSION   := $(shell sed -n 's/^\#define MUSE_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' include/muse.h | paste -sd.)
COMMIT_H  := $(BUILD)/gen/muse_commit.h
TEST_OBJ_DIR := $(BUILD)/obj
# make emu512 takes from the normal build (OBJ_FROM) every object its flags leave unchanged: all
# but cpu.c (MUSE_CPU_EMULATE_*, the only user of those) and the *_avx512.c / *_amx.c kernels
# (SIMDe, the tile C model), which it compiles itself.
EMU_SRC   := src/core/cpu.c $(filter %_avx512.c %_amx.c,$(LIB_SRC))
EMU_TESTS := tests/kernels/test_kernels_simd tests/kernels/test_tile_gemm tests/kernels/test_attn_flash tests/kernels/test_gemm_r8 \
             tests/model/test_forward tests/model/test_tile_forward
ifneq ($(OBJ_FROM),)
LIB_OBJ   := $(patsubst %.c,$(OBJ_FROM)/obj/%.o,$(filter-out $(EMU_SRC),$(LIB_SRC))) $(EMU_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(OBJ_FROM)/obj/%.o)
TEST_OBJ_DIR := $(OBJ_FROM)/obj
endif
# make fuzz takes the SIMD kernel files' objects (ISA_SRC) from the normal build (ISA_FROM): the
# fuzzers do not reach the kernels (the parsers are what they search), and clang's build of them
# took two minutes of the test command.
ISA_SRC   := $(filter %_avx2.c %_avx512.c %_amx.c,$(LIB_SRC))
ifneq ($(ISA_FROM),)
LIB_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(ISA_SRC),$(LIB_SRC))) $(ISA_SRC:%.c=$(ISA_FROM)/obj/%.o)
endif

# Object files are kept (make would delete the test programs' objects as intermediates, and make
# emu512, which links five of them from build/, would compile them again).
.SECONDARY:
.PHONY: all asan fuzz emu512 test clean format install uninstall print-commit print-asan-tests FORCE
# (the sanitizer variants skip the shared library and the man page)
all: $(BUILD)/muse $(TEST_BIN) $(BENCH_BIN) $(if $(SAN),,$(SOLIB) $(BUILD)/muse.1)

# The commit muse is built from (scripts/commit.sh), embedded by src/core/version.c; the header is
# rewritten only when the commit changes, so an unchanged tree rebuilds nothing.
$(COMMIT_H): FORCE
	@mkdir -p $(@D)
	@line="#define MUSE_BUILD_COMMIT \"$$(sh scripts/commit.sh)\""; \
	  [ -f $@ ] && [ "$$(cat $@)" = "$$line" ] || echo "$$line" > $@
$(BUILD)/obj/src/core/version.o: $(COMMIT_H)
print-commit:
	@sh scripts/commit.sh

# The chat page's Markdown renderer: Debian's libjs-marked, embedded at build time (no fetch at run
# time) by src/server/page_vendor.c through a generated header.
MARKED_JS ?= /usr/share/javascript/marked/marked.min.js
$(BUILD)/gen/muse_marked.h: $(wildcard $(MARKED_JS)) src/server/page/embed.py
	@mkdir -p $(@D)
	@test -f $(MARKED_JS) || { echo "$(MARKED_JS) is missing: apt-get install libjs-marked (scripts/install-deps.sh)"; exit 1; }
	$(Q)python3 src/server/page/embed.py --header muse_marked_js $(MARKED_JS) $@
$(BUILD)/obj/src/server/page_vendor.o: $(BUILD)/gen/muse_marked.h

# The shaders: one SPIR-V module per .comp (its variants are specialization constants, chosen when
# the device builds its pipelines), validated by spirv-val when it is installed (the tests run it
# on every module too: tests/vulkan/test_spirv.sh), embedded as C arrays.
VK_SPV := $(patsubst $(VK_DIR)/shaders/%.comp,$(BUILD)/gen/spv/%.spv,$(sort $(wildcard $(VK_DIR)/shaders/*.comp)))
$(BUILD)/gen/spv/%.spv: $(VK_DIR)/shaders/%.comp $(wildcard $(VK_DIR)/shaders/*.glsl $(VK_DIR)/shaders/*.h)
	@mkdir -p $(@D)
	@echo "GLSLC $<"
	$(Q)$(GLSLC) -fshader-stage=compute --target-env=vulkan1.2 -O -o $@ $<
	$(Q)! command -v spirv-val >/dev/null || spirv-val --target-env vulkan1.2 $@
$(BUILD)/gen/muse_vk_shaders.h: $(VK_SPV) $(VK_DIR)/shaders/embed_spv.py
	$(Q)python3 $(VK_DIR)/shaders/embed_spv.py $@ $(VK_SPV)
$(BUILD)/obj/$(VK_DIR)/vk_device.o: $(BUILD)/gen/muse_vk_shaders.h

# The library is compiled once, position-independent, for libmuse.a (the CLI, tests, benchmarks)
# and libmuse.so alike (it used to be compiled twice, the .so's copy with -fPIC in build/pic/).
# -fno-semantic-interposition lets the compiler call and inline a file's own global functions
# directly, as in a non-PIC build. What still differs from the PIE objects (objdump -d, issue 28):
# a table defined in another file (muse_kvalues_iq4nl, ...) is addressed through the GOT, which
# the linker turns into a `lea` in the executables (in muse_gemm_iq4_nl_avx2: once, at its entry),
# and registers are allocated differently around it. muse bench on the busy box (synthetic Q8_0
# small model, 1 thread, --cpu-time, 12 alternating pairs): pp128 about 5% lower (10 pairs of 12),
# tg32 about 3% higher, inside the box's +-10% noise. Again on a quieter box (load ~1; 2 threads,
# --cpu-time, 5 alternating rounds, medians, the 4-layer n_embd 2048 files of docs/perf.md): Q4_K
# pp128 1.05x, tg32 1.09x; Q8_0 pp128 1.00x, tg32 0.94x - no drop beyond the noise either way.
LIB_PIC := -fPIC -fno-semantic-interposition
$(BUILD)/obj/src/%.o: CFLAGS += $(LIB_PIC)

# ISA_SAN: the sanitizer flags of the SIMD kernel files (the asan build keeps them, and
# test_kernels_simd, test_tile_gemm and the forward tests run there).
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

$(BUILD)/obj/%_amx.o: %_amx.c
	@mkdir -p $(@D)
	@echo "CC $<"
	$(Q)$(CC) $(ISA_CFLAGS) $(ISA_AMX) -c $< -o $@

ifneq ($(MPI_LIBS),)
$(BUILD)/obj/src/backend/tp/comm_mpi.o: CFLAGS += $(MPI_CFLAGS) -DMUSE_HAVE_MPI
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "CC $<"
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(SOLIB): $(LIB_OBJ)
	@echo "LD $@"
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) -o $@ $^ $(LIB_LDLIBS)

# The man page, from the --help texts (scripts/gen_man.sh).
$(BUILD)/muse.1: $(BUILD)/muse scripts/gen_man.sh
	$(Q)sh scripts/gen_man.sh $(BUILD)/muse > $@

# make install PREFIX=/usr/local (DESTDIR for staging): the CLI, libmuse.a, libmuse.so (with its
# soname link), muse.h, muse.pc (pkg-config) and the man page; `make uninstall` removes them.
PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
MANDIR  ?= $(PREFIX)/share/man
install: $(BUILD)/muse $(LIB) $(SOLIB) $(BUILD)/muse.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(BUILD)/muse $(DESTDIR)$(PREFIX)/bin/muse
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libmuse.a
	install -m 755 $(SOLIB) $(DESTDIR)$(LIBDIR)/libmuse.so.$(VERSION)
	ln -sf libmuse.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libmuse.so
	install -m 644 include/muse.h $(DESTDIR)$(INCDIR)/muse.h
	install -m 644 $(BUILD)/muse.1 $(DESTDIR)$(MANDIR)/man1/muse.1
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCDIR@|$(INCDIR)|; s|@VERSION@|$(VERSION)|' \
	    -e 's|@REQUIRES@|$(LIB_PKGS)|; s|@LIBS_PRIVATE@|$(MPI_LIBS)|' scripts/muse.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/muse.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/muse $(DESTDIR)$(LIBDIR)/libmuse.a $(DESTDIR)$(LIBDIR)/libmuse.so \
	    $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libmuse.so.$(VERSION) $(DESTDIR)$(INCDIR)/muse.h \
	    $(DESTDIR)$(LIBDIR)/pkgconfig/muse.pc $(DESTDIR)$(MANDIR)/man1/muse.1

$(BUILD)/muse: $(TOOL_OBJ) $(LIB)
	@echo "LD $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(TOOL_OBJ) $(LIB) $(LDLIBS)

$(BUILD)/tests/%: $(TEST_OBJ_DIR)/tests/%.o $(LIB)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The test variants (asan, fuzz, emu512) keep line tables only (-g1): their reports still name the
# file and line, and the compiles are shorter (the test command's budget, README).
# ASan + UBSan: catches out-of-bounds reads in parsers and undefined shifts in kernels.
# Only the C test programs of ASAN_TESTS: run-tests.sh runs nothing else from build-asan/ (the CLI
# and the benchmarks are left out). ASAN_SKIP: tests that run only in the normal build (and
# emu512), each with its reason:
#   test_tile_forward: the cpu backend against ref op by op inside whole forwards, for every tile
#     type: under the sanitizers it was the longest test (155 s of 1413 test-seconds on the busy
#     box), and the code it runs is checked under them by test_tile_gemm (the tile GEMM, every
#     type and edge shape), test_attn_flash (flash attention) and test_forward (the forward on
#     both backends, the KV ring). It runs in the normal build and at avx512 and amx on emu512.
#   test_vulkan_ops, test_vulkan_models: the Vulkan device on the machine's driver (lavapipe in CI): the sanitizers
#     would check Mesa and LLVM more than muse (and report their leaks); it runs in the normal build.
ASAN_SKIP  := tests/model/test_tile_forward tests/vulkan/test_vulkan_ops tests/vulkan/test_vulkan_models
ASAN_TESTS := $(filter-out $(ASAN_SKIP),$(TEST_SRC:%.c=%))
# MUSE_KERNELS_COMPACT (asan and emu512): the tile GEMM with one kernel per panel count, the
# activation rows' group size a run-time value, instead of one unrolled kernel per size (the same
# operations in the same order for every output: gemm_tiles_avx512.c); its AVX-512 file took three
# minutes to compile under the sanitizers and two on SIMDe. The normal build tests the unrolled ones.
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g1 -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -DMUSE_KERNELS_COMPACT" $(ASAN_TESTS:%=build-asan/%)
print-asan-tests:
	@echo $(ASAN_TESTS)

# libFuzzer: every library object is built with coverage + ASan; each target links its own main
# (the targets link in parallel under make -j).
FUZZ_CFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
FUZZ_BIN    := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
fuzz: $(ISA_SRC:%.c=$(BUILD)/obj/%.o)
	$(MAKE) BUILD=build-fuzz CC=clang OPT="-O1 -g1" SAN="$(FUZZ_CFLAGS)" ISA_FROM=$(BUILD) $(FUZZ_BIN)
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c build-fuzz/libmuse.a
	@echo "clang $< -> $@"
	$(Q)clang -std=c11 $(WARN) -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -Itests $(shell pkg-config --cflags $(PKGS) 2>/dev/null) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -MMD -MP -MF $@.d \
	    $< build-fuzz/libmuse.a $(LDLIBS) -o $@

# AVX-512 without an AVX-512 CPU: the *_avx512.c kernels built with the AVX2 flags and SIMDe's
# emulation of the AVX-512 intrinsics (libsimde-dev), the CPU check told to count AVX2 as AVX-512
# VNNI; the *_amx.c kernels likewise, their tile instructions on a C model (amx_tiles.h), the CPU
# check told that AMX is there. For the tests only (the kernel tests, test_forward and cpu == ref
# at MUSE_CPU=avx512 and amx).
emu512: $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(EMU_SRC),$(LIB_SRC)) $(TOOL_SRC)) $(EMU_TESTS:%=$(BUILD)/obj/%.o)
	$(MAKE) BUILD=build-emu512 OBJ_FROM=$(BUILD) OPT="-O2 -g1" ISA_AVX512="$(ISA_AVX2) -DMUSE_EMULATE_AVX512" \
	    ISA_AMX="$(ISA_AVX2) -DMUSE_EMULATE_AVX512 -DMUSE_EMULATE_AMX" \
	    SAN="-DMUSE_CPU_EMULATE_AVX512 -DMUSE_CPU_EMULATE_AMX -DMUSE_KERNELS_COMPACT" \
	    build-emu512/muse $(EMU_TESTS:%=build-emu512/%)

test: all asan fuzz emu512
	bash scripts/run-tests.sh

clean:
	rm -rf build build-asan build-fuzz build-emu512

format:
	clang-format -i $(LIB_SRC) $(TOOL_SRC) $(TEST_SRC) $(BENCH_SRC) $(FUZZ_SRC) $(shell find include src tests tools bench -name '*.h')

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
