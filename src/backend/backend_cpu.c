/*
 * backend_cpu.c - the fast CPU backend ("cpu"): the ops of backend.h on a persistent thread
 * pool with the SIMD kernels of kernels/kernels.h (level chosen at start-up, MUSE_CPU forces one).
 *
 * The forward runs as one region on the pool (parallel: muse_threadpool_run; barrier:
 * muse_threadpool_barrier); the ops below compute the calling thread's share.
 * matmul (a step of one or more jobs reading the same rows): every thread converts its rows
 * (r % nth == ith) of the activations once for all jobs that read the same format (the forward's
 * quantizers, x86_numerics.h), a barrier, then the threads claim chunks of the jobs' output rows
 * from a shared counter (kernels/matmul.h; reference fallback per type). With kernels marked
 * exact (kernels.h) the results equal the ref backend's bit for bit, for any thread count.
 * attention: split over (token, KV head, block of query heads) work items, or over single heads
 * when a batch has few queries; each query head follows the ref backend's muse_attn_head_ref
 * (ggml's x86 numerics: tinyBLAS lane orders, vector exp in the softmax), so the two backends
 * agree bit for bit: over an F16, F32 or Q8_0 cache with the kernels' K.q / V.p helpers
 * (attn_head_fast, the same operations in the same order; over F16 the heads of a work item,
 * which share one KV head, together: attn_group_f16 reads each K/V row once for all of them),
 * otherwise by calling muse_attn_head_ref itself; the sigmoid gate is applied to each head where
 * it was computed.
 *
 * Everything is sized from the plan at init; the per-token path allocates nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/repack.h"
#include "kernels/types.h"
#include "kernels/x86_numerics.h"
#include "backend/backend.h"

#define ATTN_QB 16    /* query heads per attention work item */
/* Query rows (tokens x heads of one KV head) per flash attention work item: up to FLASH_ROWS (each
 * item widens its KV head's visible K/V rows once: at depth 4096 with 32 rows that was a third of
 * the flash time, docs/perf.md), fewer while there would be under 2 items per thread, down to
 * FLASH_ROWS_MIN. The item's score rows (4 bytes per row and cell of the cache, per thread) are
 * kept within FLASH_SCORE_BYTES where FLASH_ROWS_MIN rows allow: 128 rows up to 16384 cells, 32 at
 * 131072 (16 MiB). */
#define FLASH_ROWS 128
#define FLASH_ROWS_MIN 32
#define FLASH_SCORE_BYTES ((size_t)8 << 20)
#define FLASH_MIN 4   /* queries per call from which flash attention runs (decode stays exact) */
#define R8_TILE_ROWS 64 /* rows of the interleaved weights turned back into rows per tile GEMM call */
#define SPLIT_ROWS 8  /* matmul output rows are split between threads in units of this many (the
                         interleaved rows' groups, kernels/repack.h, rely on 8) */
#define CHUNKS_PER_THREAD 8 /* matmul chunks per thread and step (claimed dynamically) ... */
#define MAX_CHUNK_UNITS 16  /* ... of at most this many units (128 rows: ~150-220 KB of a 2048-wide
                               4-6 bit matrix), so that threads finish within ~20 us of each other */

/* Per-thread scratch and state. */
struct attn_scratch {
    unsigned n_steps; /* matmul steps this thread has run (the same on every thread) */
    void *tile;      /* [tile_bytes] the tile GEMM's packed weight panel (32-byte aligned) */
    void *rows;      /* [R8_TILE_ROWS] weight rows unpacked from an interleaved copy for the tile GEMM */
    void *flash;     /* the flash attention's scratch (kernels.h muse_attn_flash_scratch) */
    float *scores;   /* [ATTN_QB][max_cells] */
    float *gscratch; /* [ATTN_QB * 9 * max_head_dim] attn_group_f16's queries and V.p lanes */
    float *fscratch; /* [10 * max_head_dim] muse_attn_head_ref's scratch */
    uint8_t *qc;     /* [4 * max_head_dim + 64] one query head in the dot partner type */
};

struct cpu_state {
    struct muse_backend_plan plan;
    const struct muse_kernels *k;
    struct muse_threadpool *pool;
    uint8_t *xq;               /* [n_batch][xq_stride] activation rows in vec_dot_type */
    size_t xq_stride;
    uint8_t *xp;               /* [n_batch][xp_stride] the same rows in the tile layout (tile GEMM) */
    size_t xp_stride;
    size_t tile_bytes;         /* per-thread tile scratch (0: the kernels have no tile GEMM) */
    int32_t flash_rows;        /* query rows per flash attention item at most (FLASH_ROWS) */
    struct attn_scratch *ts;   /* [n_threads] */
    /* next unclaimed chunk of the matmul step in flight; steps alternate between the two */
    struct {
        _Alignas(64) int v;
    } next_chunk[2];
};

static void cpu_free(void *state) {
    struct cpu_state *s = state;
    if (!s) return;
    muse_threadpool_free(s->pool);
    if (s->ts) {
        for (int i = 0; i < s->plan.n_threads; i++) {
            free(s->ts[i].scores);
            free(s->ts[i].fscratch);
            free(s->ts[i].gscratch);
            free(s->ts[i].qc);
            free(s->ts[i].tile);
            free(s->ts[i].rows);
            free(s->ts[i].flash);
        }
        free(s->ts);
    }
    free(s->xq);
    free(s->xp);
    free(s);
}

/* Whether k decodes rows interleaved by 8 for some type (kernels/repack.h; Q8_0's rows are the widest). */
static bool r8_any(const struct muse_kernels *k) {
    for (int t = 0; k && t < MUSE_TYPE_COUNT; t++)
        if (k->gemm_r8[t]) return true;
    return false;
}

static muse_status cpu_init(const struct muse_backend_plan *plan, void **state, struct muse_error *err) {
    muse_status st = MUSE_ERR_NOMEM;
    /* 64-byte aligned: the chunk counters have cache lines of their own */
    struct cpu_state *s = aligned_alloc(64, (sizeof *s + 63) & ~(size_t)63);
    if (!s) goto fail;
    memset(s, 0, sizeof *s);
    s->plan = *plan;
    if (s->plan.n_threads <= 0) s->plan.n_threads = muse_cpu_features()->n_physical;
    s->k = muse_kernels_active();
    if ((st = muse_threadpool_create(s->plan.n_threads, &s->pool, err))) goto fail;
    st = MUSE_ERR_NOMEM;
    s->xq_stride = ((size_t)plan->max_ne0 * 4 + 64 + 63) & ~(size_t)63;
    s->xq = malloc((size_t)plan->n_batch * s->xq_stride);
    s->ts = calloc((size_t)s->plan.n_threads, sizeof *s->ts);
    if (!s->xq || !s->ts) goto fail;
    /* the tile GEMM: activation rows in its layout, and per thread the largest packed panel */
    for (int t = 0; t < MUSE_TYPE_COUNT && !plan->no_repack; t++) {
        const size_t b = muse_matmul_tile_scratch(s->k, (enum muse_type)t, plan->max_ne0);
        if (b > s->tile_bytes) s->tile_bytes = (b + 63) & ~(size_t)63;
    }
    if (s->tile_bytes) {
        s->xp_stride = muse_matmul_tile_act_bytes_max(s->k, plan->max_ne0);
        s->xp = aligned_alloc(64, (size_t)plan->n_batch * s->xp_stride);
        if (!s->xp) goto fail;
    }
    const size_t cells = plan->max_cells ? plan->max_cells : 1, hd = (size_t)plan->max_head_dim;
    s->flash_rows = FLASH_ROWS;
    while (s->flash_rows > FLASH_ROWS_MIN && (size_t)s->flash_rows * 4 * cells > FLASH_SCORE_BYTES) s->flash_rows /= 2;
    for (int i = 0; i < s->plan.n_threads; i++) {
        struct attn_scratch *t = &s->ts[i];
        t->scores = malloc(sizeof(float) * ATTN_QB * cells);
        t->fscratch = malloc(sizeof(float) * 10 * hd);
        t->qc = malloc(hd * 4 + 64);
        t->gscratch = malloc(sizeof(float) * ATTN_QB * 9 * hd);
        if (!t->scores || !t->fscratch || !t->qc || !t->gscratch) goto fail;
        if (s->tile_bytes && !(t->tile = aligned_alloc(64, s->tile_bytes))) goto fail;
        if (s->tile_bytes && r8_any(s->k) &&
            !(t->rows = malloc(R8_TILE_ROWS * muse_type_row_size(MUSE_TYPE_Q8_0, (plan->max_ne0 + 31) / 32 * 32) + 64)))
            goto fail;
        /* no_repack: the exact kernels at every batch size, so no flash attention either */
        if (s->k->attn_flash_f16 && !plan->no_repack && plan->max_head_dim % 8 == 0 && plan->max_head_dim > 0 &&
            !(t->flash = aligned_alloc(64, (s->k->attn_flash_scratch(plan->max_head_dim, s->flash_rows, (uint32_t)cells) + 63) & ~(size_t)63)))
            goto fail;
    }
    *state = s;
    return MUSE_OK;
fail:
    cpu_free(s);
    if (st == MUSE_ERR_NOMEM) return muse_error_set(err, MUSE_ERR_NOMEM, "cpu backend: out of memory for scratch buffers");
    return muse_error_prefix(err, "cpu backend: ");
}

// ---- the region -----------------------------------------------------------------------------

static void cpu_parallel(void *state, muse_backend_fn fn, void *ctx) {
    struct cpu_state *s = state;
    muse_threadpool_run(s->pool, fn, ctx);
}

static void cpu_barrier(void *state) {
    struct cpu_state *s = state;
    muse_threadpool_barrier(s->pool);
}

// ---- matmul ----------------------------------------------------------------------------------

/* Whether the tile GEMM runs for weight w and n_rows activation rows. A weight with rows interleaved
 * by 8 keeps its interleaved kernel below the general threshold (tile_min_act) even where the type's
 * small-batch threshold is lower: the tile GEMM would first have to unpack its rows (run_units),
 * and 16 rows then cost more than the interleaved kernel (docs/perf.md, issue 29 on the Xeon). */
static bool use_tile(const struct cpu_state *s, const struct muse_weight *w, int32_t n_rows) {
    if (w->r8 && s->k && s->k->gemm_r8[w->type] && n_rows < s->k->tile_min_act) return false;
    return s->tile_bytes && muse_matmul_tile_supported(s->k, w->type, w->ne0, n_rows) &&
           muse_matmul_tile_scratch(s->k, w->type, w->ne0) <= s->tile_bytes;
}

/* Whether weights a and b read the same converted activation rows (with n_rows rows). */
static bool same_act(const struct cpu_state *s, const struct muse_weight *a, const struct muse_weight *b,
                     int32_t n_rows) {
    const bool ta = use_tile(s, a, n_rows);
    if (ta != use_tile(s, b, n_rows)) return false;
    return muse_type_traits[a->type].vec_dot_type == muse_type_traits[b->type].vec_dot_type &&
           (ta || muse_matmul_act_layout(s->k, a->type) == muse_matmul_act_layout(s->k, b->type));
}

/* The rows of mw against the activations: the tile GEMM (tile) or the kernels, reading xq; the
 * tile GEMM declines no supported shape, the reference (xq's reference layout) would run if it did. */
static void plain_rows(struct cpu_state *s, const struct muse_matmul_weight *mw, int32_t n_rows, float *y, int64_t ldy,
                       bool tile, int ith) {
    if (!tile || !muse_matmul_tile(s->k, mw, s->xp, s->xp_stride, n_rows, y, ldy, s->ts[ith].tile, s->tile_bytes))
        muse_matmul(tile ? NULL : s->k, mw, s->xq, s->xq_stride, n_rows, y, ldy, 0, 1);
}

/*
 * Rows u0 * SPLIT_ROWS .. u1 * SPLIT_ROWS of the outputs of jobs[j0..j1), which all read s->xq:
 * the rows of all the weights, each counted in units of SPLIT_ROWS rows from its first row
 * (cache lines of y), form one list. Each piece runs as its own matmul on a row view of the
 * weight, followed by the job's epilogue on the columns it wrote.
 */
static void run_units(struct cpu_state *s, const struct muse_matmul_job *jobs, int j0, int j1, int32_t n_rows,
                      int64_t u0, int64_t u1, bool tile, int ith) {
    int64_t base = 0; /* first unit of job j */
    for (int j = j0; j < j1 && base < u1; j++) {
        const struct muse_weight *w = &jobs[j].w;
        const int64_t nu = (w->ne1 + SPLIT_ROWS - 1) / SPLIT_ROWS;
        const int64_t a = (u0 > base ? u0 : base) - base, b = (u1 < base + nu ? u1 : base + nu) - base;
        base += nu;
        if (a >= b) continue;
        const int64_t i0 = a * SPLIT_ROWS, i1 = b * SPLIT_ROWS < w->ne1 ? b * SPLIT_ROWS : w->ne1;
        int64_t r0 = i0; /* the first row left to the plain rows below */
        const muse_gemm_r8_fn r8 = w->r8 && s->k ? s->k->gemm_r8[w->type] : NULL;
        if (r8) {
            /* the rows interleaved by 8 (i0 is a multiple of SPLIT_ROWS; a last partial group from the
             * original rows below): the interleaved kernel below the tile GEMM's threshold, else the
             * groups back into rows in the thread's scratch, R8_TILE_ROWS at a time, for the tile GEMM
             * (the original rows are not read again: cpu_weights.c pages them out) */
            const int64_t g1 = (i1 < w->ne1 / 8 * 8 ? i1 : w->ne1 / 8 * 8) / 8;
            const uint8_t *w8 = w->r8;
            for (int64_t g = i0 / 8; g < g1;) {
                const int64_t ge = !tile ? g1 : g + R8_TILE_ROWS / 8 < g1 ? g + R8_TILE_ROWS / 8 : g1;
                float *y = jobs[j].y + 8 * g;
                if (!tile) {
                    r8(w->ne0, w8 + (size_t)(8 * g) * w->row_size, ge - g, s->xq, s->xq_stride, n_rows, y, w->ne1);
                } else {
                    muse_unpack_r8(w->type, w8 + (size_t)(8 * g) * w->row_size, w->row_size, ge - g, s->ts[ith].rows);
                    const struct muse_matmul_weight mr = {w->type, w->ne0, 8 * (ge - g), s->ts[ith].rows, w->row_size};
                    plain_rows(s, &mr, n_rows, y, w->ne1, true, ith);
                }
                g = ge;
            }
            if (g1 * 8 > r0) r0 = g1 * 8;
        }
        if (r0 < i1) {
            const struct muse_matmul_weight mw = {w->type, w->ne0, i1 - r0, (const uint8_t *)w->data + (size_t)r0 * w->row_size,
                                                  w->row_size};
            plain_rows(s, &mw, n_rows, jobs[j].y + r0, w->ne1, tile, ith);
        }
        muse_matmul_job_epilogue(&jobs[j], n_rows, i0, i1);
    }
}

/*
 * The outputs of jobs[j0..j1) in chunks of units (about CHUNKS_PER_THREAD per thread) that the
 * threads claim from a shared counter: a thread that the OS lets run longer (a shared machine)
 * takes more chunks instead of the others waiting for it at the next barrier. The split never
 * changes results (every output row is computed the same way wherever it lands). The counter of
 * the next step is reset by thread 0 here: every thread has left the previous step's loop, which
 * used that counter, before the barrier this step has just passed.
 */
static void run_jobs(struct cpu_state *s, const struct muse_matmul_job *jobs, int j0, int j1, int32_t n_rows, int ith,
                     int nth, bool tile) {
    int64_t units = 0;
    for (int j = j0; j < j1; j++) units += (jobs[j].w.ne1 + SPLIT_ROWS - 1) / SPLIT_ROWS;
    if (nth == 1) {
        run_units(s, jobs, j0, j1, n_rows, 0, units, tile, ith);
        return;
    }
    const unsigned step = s->ts[ith].n_steps++;
    int *next = &s->next_chunk[step & 1].v;
    if (ith == 0) __atomic_store_n(&s->next_chunk[(step + 1) & 1].v, 0, __ATOMIC_RELAXED);
    int64_t per = units / ((int64_t)nth * CHUNKS_PER_THREAD);
    per = per < 1 ? 1 : per > MAX_CHUNK_UNITS ? MAX_CHUNK_UNITS : per;
    const int64_t n_chunks = (units + per - 1) / per;
    for (int64_t c; (c = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED)) < n_chunks;)
        run_units(s, jobs, j0, j1, n_rows, c * per, (c + 1) * per < units ? (c + 1) * per : units, tile, ith);
}

/* Jobs that read the same converted rows share one conversion and one barrier; a job in another
 * activation format starts a new group (after a barrier: xq is reused). */
static void cpu_matmul(void *state, const struct muse_matmul_job *jobs, int n_jobs, const float *x, int32_t n_rows,
                       int ith, int nth) {
    struct cpu_state *s = state;
    const int64_t ne0 = jobs[0].w.ne0;
    MUSE_ASSERT(n_rows <= s->plan.n_batch && ne0 <= s->plan.max_ne0);
    for (int j0 = 0, j1; j0 < n_jobs; j0 = j1) {
        for (j1 = j0 + 1; j1 < n_jobs && same_act(s, &jobs[j0].w, &jobs[j1].w, n_rows); j1++) {}
        for (int j = j0; j < j1; j++) MUSE_ASSERT(jobs[j].w.ne0 == ne0 && muse_matmul_supported(jobs[j].w.type, ne0));
        const bool tile = use_tile(s, &jobs[j0].w, n_rows);
        if (j0 > 0) muse_threadpool_barrier(s->pool);
        if (tile) /* the reference layout in xq, and the tile layout from it in xp */
            muse_matmul_tile_quantize(s->k, jobs[j0].w.type, ne0, x, ne0, n_rows, s->xq, s->xq_stride, s->xp,
                                      s->xp_stride, ith, nth);
        else
            muse_matmul_quantize(s->k, jobs[j0].w.type, ne0, x, ne0, n_rows, s->xq, s->xq_stride, ith, nth);
        muse_threadpool_barrier(s->pool);
        run_jobs(s, jobs, j0, j1, n_rows, ith, nth, tile);
    }
}

// ---- attention --------------------------------------------------------------------------------

/* Visible keys of the query at position p: positions lo..p (the window on SWA layers). */
static int32_t attn_lo(const struct muse_attn_args *a, int32_t p) {
    return a->n_swa > 0 && p - a->n_swa + 1 > 0 ? p - a->n_swa + 1 : 0;
}

/* The kernels' helpers for the cache type of a (kernels.h), or false when there are none for it. */
static bool attn_fns(const struct muse_kernels *k, const struct muse_attn_args *a, muse_attn_kq_fn *kq,
                     muse_attn_kq_q_fn *kq_q, muse_attn_pv_fn *pv) {
    const int32_t hd = a->head_dim;
    *kq = NULL;
    *kq_q = NULL;
    *pv = NULL;
    if (!k || hd % 8) return false;
    switch (a->kv->type) {
    case MUSE_TYPE_F16: *kq = k->attn_kq_f16, *pv = k->attn_pv_f16; break;
    case MUSE_TYPE_F32: *kq = k->attn_kq_f32, *pv = k->attn_pv_f32; break;
    case MUSE_TYPE_Q8_0: if (hd % 32 == 0) *kq_q = k->attn_kq_q8_0, *pv = k->attn_pv_q8_0; break;
    default: break;
    }
    return (*kq || *kq_q) && *pv;
}

/* muse_attn_head_ref for an F16, F32 or Q8_0 cache, its K.q and V.p loops run by the kernels'
 * helpers in the same order (kernels.h); everything else is the same scalar code in the same
 * order. Scratch: scores [n_cells], fscratch [9 * head_dim], qc [4 * head_dim + 64]. */
static void attn_head_fast(const struct muse_kernels *k, const struct muse_attn_args *a, int32_t t, int32_t h,
                           float *scores, float *fscratch, uint8_t *qc) {
    const struct muse_kv_layer *kv = a->kv;
    const int32_t hd = a->head_dim;
    const int32_t kvh = h / (a->n_head / a->n_head_kv);
    const bool f16 = kv->type == MUSE_TYPE_F16;
    const size_t head_bytes = muse_type_row_size(kv->type, hd);
    muse_attn_kq_fn kq;
    muse_attn_kq_q_fn kq_q;
    muse_attn_pv_fn pv;
    attn_fns(k, a, &kq, &kq_q, &pv);
    float *qf = fscratch, *lanes = fscratch + hd; /* [hd] the query as ggml sees it, [8][hd] V.p lanes */
    const int32_t lo = attn_lo(a, a->pos[t]);
    const int32_t n = a->pos[t] - lo + 1;
    const float *qh = a->q + ((size_t)t * a->n_head + h) * hd;
    if (f16) for (int32_t d = 0; d < hd; d++) qf[d] = muse_fp16_to_fp32(muse_fp32_to_fp16(qh[d]));
    if (kq_q) muse_type_traits[muse_type_traits[kv->type].vec_dot_type].from_float(qh, qc, hd);
    const float *qk = f16 ? qf : qh;
    /* keys in runs of consecutive cells (the cache is a ring) */
    for (int32_t j = 0; j < n;) {
        const uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
        const int32_t run = (int32_t)(kv->n_cells - cell) < n - j ? (int32_t)(kv->n_cells - cell) : n - j;
        const uint8_t *kb = (const uint8_t *)kv->k + cell * kv->k_row_size + (size_t)kvh * head_bytes;
        if (kq_q) kq_q(hd, run, kb, kv->k_row_size, qc, scores + j);
        else kq(hd, run, kb, kv->k_row_size, qk, scores + j);
        j += run;
    }
    muse_attn_softmax(scores, n, lo, a->scale, f16, k->attn_probs_f16);
    memset(lanes, 0, sizeof(float) * 8 * (size_t)hd);
    for (int32_t j = 0; j < n;) {
        const uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
        const int32_t run = (int32_t)(kv->n_cells - cell) < n - j ? (int32_t)(kv->n_cells - cell) : n - j;
        pv(hd, run, (const uint8_t *)kv->v + cell * kv->v_row_size + (size_t)kvh * head_bytes, kv->v_row_size,
           scores + j, (lo + j) & 7, lanes);
        j += run;
    }
    float *oh = a->out + ((size_t)t * a->n_head + h) * hd;
    for (int32_t d = 0; d < hd; d++) {
        float l[8];
        for (int i = 0; i < 8; i++) l[i] = lanes[(size_t)i * hd + d];
        oh[d] = muse_x86_hsum8(l);
    }
}

/* attn_head_fast for the nq query heads h0.. of token t, which read one KV head, over an F16
 * cache with the kernels' GQA helpers (kernels.h attn_kq_f16_multi / attn_pv_f16_multi): every
 * K and V row of the window is read and widened once for the nq heads instead of once per head;
 * per head the operations and their order are attn_head_fast's. Scratch: scores [nq][s_stride]
 * (s_stride >= the key count), g [nq * 9 * head_dim]. */
static void attn_group_f16(const struct muse_kernels *k, const struct muse_attn_args *a, int32_t t, int32_t h0,
                           int32_t nq, float *scores, size_t s_stride, float *g) {
    const struct muse_kv_layer *kv = a->kv;
    const int32_t hd = a->head_dim;
    const int32_t kvh = h0 / (a->n_head / a->n_head_kv);
    const size_t head_bytes = muse_type_row_size(kv->type, hd), l_stride = 8 * (size_t)hd;
    float *qf = g, *lanes = g + (size_t)nq * hd; /* [nq][hd] queries as ggml sees them, [nq][8][hd] V.p lanes */
    const int32_t lo = attn_lo(a, a->pos[t]);
    const int32_t n = a->pos[t] - lo + 1;
    const float *q = a->q + ((size_t)t * a->n_head + h0) * hd; /* the nq heads are consecutive */
    for (size_t d = 0; d < (size_t)nq * hd; d++) qf[d] = muse_fp16_to_fp32(muse_fp32_to_fp16(q[d]));
    for (int32_t j = 0; j < n;) { /* keys in runs of consecutive cells (the cache is a ring) */
        const uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
        const int32_t run = (int32_t)(kv->n_cells - cell) < n - j ? (int32_t)(kv->n_cells - cell) : n - j;
        k->attn_kq_f16_multi(hd, run, (const uint8_t *)kv->k + cell * kv->k_row_size + (size_t)kvh * head_bytes,
                             kv->k_row_size, nq, qf, (size_t)hd, scores + j, s_stride);
        j += run;
    }
    for (int32_t i = 0; i < nq; i++)
        muse_attn_softmax(scores + (size_t)i * s_stride, n, lo, a->scale, true, k->attn_probs_f16);
    memset(lanes, 0, sizeof(float) * l_stride * (size_t)nq);
    for (int32_t j = 0; j < n;) {
        const uint32_t cell = (uint32_t)(lo + j) % kv->n_cells;
        const int32_t run = (int32_t)(kv->n_cells - cell) < n - j ? (int32_t)(kv->n_cells - cell) : n - j;
        k->attn_pv_f16_multi(hd, run, (const uint8_t *)kv->v + cell * kv->v_row_size + (size_t)kvh * head_bytes,
                             kv->v_row_size, nq, scores + j, s_stride, (lo + j) & 7, lanes, l_stride);
        j += run;
    }
    for (int32_t i = 0; i < nq; i++) {
        float *oh = a->out + ((size_t)t * a->n_head + h0 + i) * hd;
        const float *li = lanes + (size_t)i * l_stride;
        for (int32_t d = 0; d < hd; d++) {
            float l[8];
            for (int r = 0; r < 8; r++) l[r] = li[(size_t)r * hd + d];
            oh[d] = muse_x86_hsum8(l);
        }
    }
}

/* Query heads h0 .. h0 + nq - 1 (nq <= ATTN_QB, one KV head) of token tok. */
static void attn_item(const struct muse_kernels *k, size_t s_stride, struct attn_scratch *t,
                      const struct muse_attn_args *a, int32_t tok, int32_t h0, int32_t nq) {
    muse_attn_kq_fn kq;
    muse_attn_kq_q_fn kq_q;
    muse_attn_pv_fn pv;
    const bool fast = attn_fns(k, a, &kq, &kq_q, &pv);
    if (fast && a->kv->type == MUSE_TYPE_F16 && k->attn_kq_f16_multi && k->attn_pv_f16_multi) {
        attn_group_f16(k, a, tok, h0, nq, t->scores, s_stride, t->gscratch);
        for (int32_t i = 0; i < nq; i++) muse_attn_gate_head(a, tok, h0 + i);
        return;
    }
    for (int32_t i = 0; i < nq; i++) {
        if (fast) attn_head_fast(k, a, tok, h0 + i, t->scores, t->fscratch, t->qc);
        else muse_attn_head_ref(a, tok, h0 + i, t->scores, t->fscratch, t->qc);
        muse_attn_gate_head(a, tok, h0 + i);
    }
}

/*
 * Work items (token, KV head, block of ATTN_QB query heads) dealt round-robin, which balances the
 * causal growth of the key count over a prompt. With fewer items than 2 per thread (decode), the
 * single query heads are cut into contiguous ranges instead, so that every thread has work and
 * few threads read the same KV head; a range still runs its heads of one KV head together.
 */
/*
 * Flash attention (kernels.h muse_attn_flash_fn) for batches of queries over an F16 cache: work
 * items (block of tokens, KV head, block of up to ATTN_QB of its query heads) of at most
 * flash_rows query rows, dealt round-robin; every item reads its KV head's visible K/V rows once
 * for all its rows. Each output row is computed by one item whatever the thread count.
 */
static void attention_flash(struct cpu_state *s, const struct muse_attn_args *a, int ith, int nth) {
    const int32_t group = a->n_head / a->n_head_kv, hd = a->head_dim;
    const int32_t n_qb = (group + ATTN_QB - 1) / ATTN_QB;
    const int32_t nq_max = group < ATTN_QB ? group : ATTN_QB;
    int32_t tb = s->flash_rows / nq_max > 0 ? s->flash_rows / nq_max : 1; /* tokens per item */
    while (tb * nq_max > FLASH_ROWS_MIN && tb > 1 && (int64_t)((a->n_tokens + tb - 1) / tb) * a->n_head_kv * n_qb < 2 * nth)
        tb /= 2;
    const int32_t n_tb = (a->n_tokens + tb - 1) / tb;
    const int64_t n_items = (int64_t)n_tb * a->n_head_kv * n_qb;
    const size_t head_bytes = muse_type_row_size(a->kv->type, hd);
    for (int64_t it = ith; it < n_items; it += nth) {
        const int32_t qb = (int32_t)(it % n_qb), kvh = (int32_t)((it / n_qb) % a->n_head_kv);
        const int32_t t0 = (int32_t)(it / ((int64_t)n_qb * a->n_head_kv)) * tb;
        const int32_t nt = a->n_tokens - t0 < tb ? a->n_tokens - t0 : tb;
        const int32_t h0 = kvh * group + qb * ATTN_QB;
        const int32_t nq = group - qb * ATTN_QB < ATTN_QB ? group - qb * ATTN_QB : ATTN_QB;
        const size_t stride = (size_t)a->n_head * hd;
        const struct muse_attn_flash f = {
            .hd = hd, .n_tok = nt, .nq = nq,
            .q = a->q + (size_t)t0 * stride + (size_t)h0 * hd, .q_tstride = stride,
            .out = a->out + (size_t)t0 * stride + (size_t)h0 * hd, .o_tstride = stride,
            .pos = a->pos + t0, .n_swa = a->n_swa,
            .k = (const uint8_t *)a->kv->k + (size_t)kvh * head_bytes, .v = (const uint8_t *)a->kv->v + (size_t)kvh * head_bytes,
            .k_stride = a->kv->k_row_size, .v_stride = a->kv->v_row_size, .n_cells = a->kv->n_cells,
            .scale = a->scale,
        };
        if (a->kv->type == MUSE_TYPE_F32) s->k->attn_flash_f32(&f, s->ts[ith].flash);
        else if (a->kv->type == MUSE_TYPE_Q8_0) s->k->attn_flash_q8_0(&f, s->ts[ith].flash);
        else s->k->attn_flash_f16(&f, s->ts[ith].flash);
        for (int32_t t = t0; t < t0 + nt; t++)
            for (int32_t h = h0; h < h0 + nq; h++) muse_attn_gate_head(a, t, h);
    }
}

static void cpu_attention(void *state, const struct muse_attn_args *a, int ith, int nth) {
    struct cpu_state *s = state;
    MUSE_ASSERT(a->head_dim <= s->plan.max_head_dim && a->n_head % a->n_head_kv == 0);
    if (s->ts[ith].flash && a->n_tokens >= FLASH_MIN &&
        ((a->kv->type == MUSE_TYPE_F16 && a->head_dim % 8 == 0) ||
         (a->kv->type == MUSE_TYPE_F32 && a->head_dim % 32 == 0 && s->k->attn_flash_f32) ||
         (a->kv->type == MUSE_TYPE_Q8_0 && a->head_dim % 32 == 0 && s->k->attn_flash_q8_0))) {
        attention_flash(s, a, ith, nth);
        return;
    }
    const int32_t group = a->n_head / a->n_head_kv;
    const size_t s_stride = s->plan.max_cells ? (size_t)s->plan.max_cells : 1; /* scores of one head */
    const int32_t n_qb = (group + ATTN_QB - 1) / ATTN_QB;
    const int64_t n_items = (int64_t)a->n_tokens * a->n_head_kv * n_qb;
    if (n_items < 2 * (int64_t)nth) {
        const int64_t n_heads = (int64_t)a->n_tokens * a->n_head, end = n_heads * (ith + 1) / nth;
        for (int64_t it = n_heads * ith / nth, nq; it < end; it += nq) {
            const int32_t h = (int32_t)(it % a->n_head);
            nq = group - h % group; /* up to the end of h's KV head, the range and ATTN_QB */
            if (nq > end - it) nq = end - it;
            if (nq > ATTN_QB) nq = ATTN_QB;
            attn_item(s->k, s_stride, &s->ts[ith], a, (int32_t)(it / a->n_head), h, (int32_t)nq);
        }
        return;
    }
    for (int64_t it = ith; it < n_items; it += nth) {
        const int32_t qb = (int32_t)(it % n_qb);
        const int32_t kvh = (int32_t)((it / n_qb) % a->n_head_kv);
        const int32_t tok = (int32_t)(it / ((int64_t)n_qb * a->n_head_kv));
        const int32_t h0 = kvh * group + qb * ATTN_QB;
        const int32_t nq = group - qb * ATTN_QB < ATTN_QB ? group - qb * ATTN_QB : ATTN_QB;
        attn_item(s->k, s_stride, &s->ts[ith], a, tok, h0, nq);
    }
}

/* Window attention: the level's SIMD kernel where it has one (hd % 8 == 0), else the plain-C
 * one; the same bits either way. */
static void cpu_window_attention(void *state, const struct muse_window_attn_args *a, int ith, int nth) {
    const struct cpu_state *s = state;
    const bool simd = s->k->win_attn_rows && a->head_dim % 8 == 0;
    muse_win_attn_rows_fn rows = simd ? s->k->win_attn_rows : muse_win_attn_rows_ref;
    muse_window_attn_share(a, rows, cpu_barrier, state, ith, nth);
}

const struct muse_backend_ops muse_backend_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .parallel = cpu_parallel,
    .barrier = cpu_barrier,
    .matmul = cpu_matmul,
    .attention = cpu_attention,
    .window_attention = cpu_window_attention,
};
