/* Unit tests for src/core: status strings, error records, fp16/bf16 rounding, CPU detection, UTF-8. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/utf8.h"
#include "test.h"

static void test_status(void) {
    TEST_COND("ok string", strcmp(muse_status_str(MUSE_OK), "ok") == 0);
    for (int s = 0; s > -MUSE_STATUS_COUNT; s--)
        TEST_CONDF(muse_status_str((muse_status)s)[0] != '\0', "status %d has a name", s);
    TEST_COND("unknown status", strcmp(muse_status_str((muse_status)-1000), "unknown status") == 0);
    struct muse_error e;
    muse_status st = muse_error_set(&e, MUSE_ERR_FORMAT, "field %s at %d", "x", 12);
    TEST_COND("error_set returns status", st == MUSE_ERR_FORMAT && e.status == MUSE_ERR_FORMAT);
    TEST_COND("error_set message", strcmp(e.msg, "field x at 12") == 0);
    muse_error_prefix(&e, "file.gguf: ");
    TEST_COND("error_prefix", strcmp(e.msg, "file.gguf: field x at 12") == 0);
    TEST_COND("null err is fine", muse_error_set(NULL, MUSE_ERR_IO, "x") == MUSE_ERR_IO);
}

static void test_fp16(void) {
    /* every binary16 pattern round-trips through f32 (NaNs stay NaN) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = muse_fp16_to_fp32((uint16_t)h);
        uint16_t back = muse_fp32_to_fp16(f);
        if (isnan(f)) bad += !((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        else bad += back != h;
    }
    TEST_CONDF(bad == 0, "fp16 round trip: %d mismatches", bad);
    TEST_COND("1.0", muse_fp32_to_fp16(1.0f) == 0x3c00);
    TEST_COND("65504", muse_fp32_to_fp16(65504.0f) == 0x7bff);
    TEST_COND("65520 -> inf", muse_fp32_to_fp16(65520.0f) == 0x7c00);
    TEST_COND("65519 -> max", muse_fp32_to_fp16(65519.0f) == 0x7bff);
    TEST_COND("2^-25 ties to 0", muse_fp32_to_fp16(2.9802322387695312e-08f) == 0);
    TEST_COND("1.5*2^-25 -> 1 ulp", muse_fp32_to_fp16(4.470348358154297e-08f) == 1);
    /* ties to even in the normal range: 1 + 2^-11 is halfway between 1 and 1+2^-10 */
    TEST_COND("tie to even", muse_fp32_to_fp16(1.00048828125f) == 0x3c00);
    TEST_COND("tie to even up", muse_fp32_to_fp16(1.00146484375f) == 0x3c02);
    TEST_COND("-0", muse_fp32_to_fp16(-0.0f) == 0x8000);
    TEST_COND("bf16 1.0", muse_fp32_to_bf16(1.0f) == 0x3f80);
    TEST_COND("bf16 rne", muse_fp32_to_bf16(muse_f32_from_bits(0x3f808000u)) == 0x3f80);
    TEST_COND("bf16 rne up", muse_fp32_to_bf16(muse_f32_from_bits(0x3f818000u)) == 0x3f82);
    TEST_COND("bf16 nan quiet", muse_fp32_to_bf16(muse_f32_from_bits(0x7f800001u)) == 0x7fc0);
    TEST_COND("bf16 back", muse_bf16_to_fp32(0xc049) == -3.140625f);
}

static void test_cpu(void) {
    const struct muse_cpu_features *f = muse_cpu_features();
    TEST_COND("logical cpus", f->n_logical >= 1);
    TEST_COND("physical <= logical", f->n_physical >= 1 && f->n_physical <= f->n_logical);
    TEST_COND("avx2 implies os_avx", !f->avx2 || f->os_avx);
    TEST_COND("avx512 implies os_avx512", !f->avx512f || f->os_avx512);
    enum muse_cpu_level max = muse_cpu_level_max();
    setenv("MUSE_CPU", "scalar", 1);
    TEST_COND("MUSE_CPU=scalar", muse_cpu_level_active() == MUSE_CPU_LEVEL_SCALAR);
    setenv("MUSE_CPU", "amx", 1);
    TEST_COND("MUSE_CPU clamps to max", muse_cpu_level_active() == max);
    setenv("MUSE_CPU", "avx512", 1);
    TEST_COND("MUSE_CPU=avx512 below AMX", muse_cpu_level_active() == (max < MUSE_CPU_LEVEL_AVX512 ? max : MUSE_CPU_LEVEL_AVX512));
    TEST_COND("amx implies avx512 and the tile state", !f->amx_int8 || (f->avx512f && f->amx_tile && f->os_avx512));
    TEST_COND("the amx level needs amx", (max == MUSE_CPU_LEVEL_AMX) == (f->amx_int8 && max >= MUSE_CPU_LEVEL_AVX512));
    unsetenv("MUSE_CPU");
    TEST_COND("default = max, AMX only when asked",
              muse_cpu_level_active() == (max == MUSE_CPU_LEVEL_AMX ? MUSE_CPU_LEVEL_AVX512 : max));
    printf("cpu level: %s (%d logical, %d physical)\n", muse_cpu_level_name(max), f->n_logical, f->n_physical);
}

/*
 * The well-formed character at s[0..n) by decoding it (independent of utf8.c): its length when the
 * bytes decode to a scalar value (not a surrogate, at most U+10FFFF) in its shortest form, else 0.
 */
static int utf8_decoded_len(const uint8_t *s, size_t n) {
    int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
    return len;
}

static void test_utf8(void) {
    static const struct {
        const char *s;
        int want;
    } cases[] = {
        {"a", 1},             {"\xc3\xa9", 2},        {"\xe2\x82\xac", 3},   {"\xf0\x9f\x98\x80", 4},
        {"\xc3", 0},          {"\xe2\x82", 0},        {"\xf0\x9f\x98", 0},   /* incomplete: may still complete */
        {"\x80", -1},         {"\xc0\xaf", -1},       {"\xf5\x80", -1},      /* never a lead byte */
        {"\xe0\x80\x80", -1}, {"\xe0\x80", -1},       /* overlong: the lead alone is the maximal subpart */
        {"\xed\xa0\x80", -1}, {"\xf4\x90\x80\x80", -1}, /* a surrogate; above U+10FFFF */
        {"\xe2\x82\x41", -2}, {"\xf0\x9f\x98\x41", -3}, /* cut short by a non-continuation byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int got = muse_utf8_seq((const uint8_t *)cases[i].s, strlen(cases[i].s));
        TEST_CONDF(got == cases[i].want, "muse_utf8_seq case %zu: %d, want %d", i, got, cases[i].want);
    }
    /* every 1-3 byte string, and 4-byte leads with each second byte, against the decoder above */
    int bad = 0;
    uint8_t b[4];
    for (uint32_t x = 0; x < (1u << 24); x++) {
        b[0] = (uint8_t)(x >> 16), b[1] = (uint8_t)(x >> 8), b[2] = (uint8_t)x, b[3] = 0x80;
        for (size_t n = 1; n <= (b[0] >= 0xf0 ? 4u : 3u); n++) {
            const int got = muse_utf8_seq(b, n), want = utf8_decoded_len(b, n);
            /* a whole character exactly when the decoder finds one */
            if ((got > 0 ? got : 0) != want) bad++;
            /* "incomplete" only when some continuation could complete it */
            if (got == 0) {
                uint8_t full[4] = {b[0], b[1], b[2], b[3]};
                bool completes = false;
                for (unsigned t = 0x80; t <= 0xbf && !completes; t++) {
                    for (size_t j = n; j < 4; j++) full[j] = (uint8_t)t;
                    completes = utf8_decoded_len(full, 4) > 0;
                }
                if (!completes) bad++;
            }
        }
    }
    TEST_CONDF(bad == 0, "muse_utf8_seq disagrees with decoding in %d cases", bad);
    const char *text = "ab\xe2\x82\xac\xff\x41";
    TEST_COND("valid prefix stops at the ill-formed byte", muse_utf8_valid_prefix((const uint8_t *)text, strlen(text)) == 5);
    TEST_COND("valid prefix of an incomplete tail", muse_utf8_valid_prefix((const uint8_t *)"\xe2\x82", 2) == 0);
    TEST_COND("valid prefix of nothing", muse_utf8_valid_prefix((const uint8_t *)"", 0) == 0);
}

int main(void) {
    test_status();
    test_fp16();
    test_cpu();
    test_utf8();
    return TEST_REPORT();
}
