/*
 * libFuzzer target for `muse quantize`: arbitrary bytes as the input file -> muse_quantize with a
 * TYPE (and sometimes an override) picked by the first byte. Hostile metadata (architecture,
 * block_count, head counts as scalars or arrays, expert counts), tensor names, shapes and types,
 * and non-finite or extreme weights must give error values, never a crash, an out-of-bounds read
 * or a huge allocation. Files of more than 2^20 elements are only planned (dry run), to keep each
 * run fast. The input goes through a memfd (muse_quantize takes paths); the output is a private
 * file under /tmp, removed at exit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "muse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char out_path[64];

static void cleanup(void) {
    if (out_path[0]) unlink(out_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!out_path[0]) {
        snprintf(out_path, sizeof out_path, "/tmp/muse-fuzz-quantize-%d.gguf", (int)getpid());
        atexit(cleanup);
    }
    static const char *const types[] = {"Q4_K_M", "Q8_0", "Q2_K", "Q3_K_L", "Q5_K_S", "Q6_K", "Q4_0", "Q5_1",
                                        "TQ1_0", "Q1_0", "F16", "BF16", "Q4_K_S", "Q3_K_M", "Q5_K_M", "F32"};
    const uint8_t sel = data[0];
    data++;
    size--;
    int fd = memfd_create("fuzz-in", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char in_path[64];
    snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", fd);

    /* small files are quantized for real, big ones only planned */
    struct muse_gguf *g = NULL;
    struct muse_error err;
    int64_t n_elements = 0;
    if (muse_gguf_parse(data, size, "fuzz", &g, &err) == MUSE_OK) {
        for (uint64_t i = 0; i < g->n_tensors; i++) n_elements += g->tensors[i].n_elements;
        muse_gguf_free(g);
    }
    struct muse_quantize_params p = muse_quantize_default_params();
    p.type = types[sel & 15];
    p.n_threads = 1 + (sel >> 7);
    p.dry_run = n_elements > (1 << 20);
    p.allow_requantize = (sel >> 4) & 1;
    const char *tt[] = {"attn_v=q8_0", "blk\\.1\\.=q5_0", NULL};
    if ((sel >> 5) & 1) p.tensor_types = tt;
    if ((sel >> 6) & 1) p.output_tensor_type = "q4_0";
    struct muse_quantize_stats stats;
    muse_quantize(in_path, out_path, &p, &stats, &err);
    close(fd);
    return 0;
}
