/* membw.c - read-bandwidth probe over a thread pool. */
#include "core/membw.h"

#include <stdint.h>

#include "core/timer.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

struct membw_ctx {
    const uint8_t *buf;
    size_t size;
    uint64_t sink[64];   /* per thread, keeps the loads alive */
};

static void read_fn(int ith, int nth, void *vctx) {
    struct membw_ctx *c = vctx;
    size_t per = (c->size / (size_t)nth) & ~(size_t)63;
    const uint8_t *p = c->buf + per * (size_t)ith;
    if (ith == nth - 1) per = c->size - per * (size_t)ith;
    per &= ~(size_t)63;
#if defined(__x86_64__)
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < per; i += 64) {
        a0 = _mm_xor_si128(a0, _mm_load_si128((const __m128i *)(p + i)));
        a1 = _mm_xor_si128(a1, _mm_load_si128((const __m128i *)(p + i + 16)));
        a2 = _mm_xor_si128(a2, _mm_load_si128((const __m128i *)(p + i + 32)));
        a3 = _mm_xor_si128(a3, _mm_load_si128((const __m128i *)(p + i + 48)));
    }
    __m128i a = _mm_xor_si128(_mm_xor_si128(a0, a1), _mm_xor_si128(a2, a3));
    uint64_t s = (uint64_t)_mm_cvtsi128_si64(a) ^ (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(a, a));
#else
    uint64_t s = 0;
    for (size_t i = 0; i < per; i += 8) s ^= *(const uint64_t *)(p + i);
#endif
    c->sink[ith % 64] ^= s;
}

double muse_membw_read(struct muse_threadpool *pool, const void *buf, size_t size, int reps) {
    if (size < 4096) return 0;
    /* 64-byte aligned start for the aligned loads */
    const uint8_t *p = buf;
    size_t skip = (64 - ((uintptr_t)p & 63)) & 63;
    struct membw_ctx c = {.buf = p + skip, .size = (size - skip) & ~(size_t)63};
    double best = 0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        int64_t t0 = muse_time_us();
        muse_threadpool_run(pool, read_fn, &c);
        int64_t dt = muse_time_us() - t0;
        double bw = dt > 0 ? (double)c.size / ((double)dt * 1e-6) : 0;
        if (bw > best) best = bw;
    }
    return best;
}
