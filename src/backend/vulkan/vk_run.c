/*
 * vk_run.c - programs on the Vulkan device (docs/vulkan.md): prepare (check every op and weight
 * type against the shaders, upload the weights once) and run (write the run's inputs, record one
 * dispatch per op with a barrier after each - or replay the recording of a decode step of the
 * same shape - submit, wait, copy the outputs back). A matmul picks its variant (plain, f16,
 * dp4a, coopmat) by the device's features.
 *
 * Weights: every distinct host range a program reads (matmul weights, the embedding table, norm
 * weights, biases) is copied through the staging buffer into chunks of device memory; a lookup
 * from the host address gives its device address when a run is recorded. The uploads are weight
 * sets shared by every program that reads them (the contexts of one model read the same mapped
 * tensors: the second context's prepare finds every range resident and uploads nothing),
 * reference-counted and freed with the last program that reads them.
 * ROPE_ANGLES is computed on the host (muse_rope_angles, the CPU's bits) and copied in: GPU sin /
 * cos of large angles are not accurate enough.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk.h"
#include "core/error.h"
#include "kernels/types.h"

#define CHUNK_BYTES ((size_t)1 << 30)

/* A host range of weights: in a weight set, where it lies (chunk, off); in a program, its device address. */
struct vk_upl {
    const uint8_t *host;
    size_t bytes;
    int chunk;
    size_t off;
    VkDeviceAddress addr;
};

/*
 * A weight set: the ranges one prepare uploaded (those no live set held yet), in chunks of device
 * memory. Shared by every program that reads one of its ranges (the contexts of one model: their
 * programs read the same mapped tensors), reference-counted, freed with the last of them.
 */
struct vk_wset {
    struct vk_buf *chunks;
    int n_chunks;
    struct vk_upl *upl; /* sorted by host */
    int n_upl;
    int refs;
    size_t bytes;
    struct vk_wset *next;
};

struct vk_prog {
    const struct muse_program *p;
    struct vk_upl *upl; /* sorted by host, addr resolved */
    int n_upl;
    struct vk_wset **sets; /* the sets it holds a reference to */
    int n_sets;
    struct vk_prog *next;
};

typedef struct {
    uint32_t lo, hi;
} a64;

static a64 A(VkDeviceAddress a) { return (a64){(uint32_t)a, (uint32_t)(a >> 32)}; }

// ---- prepare ------------------------------------------------------------------------------------

/* Every weight type muse reads has a dequantizer in dequant.glsl (Q8_1 and Q8_K are activation
 * formats; the integer types and F64 are not weights). */
static bool type_has_shader(enum muse_type t) {
    switch (t) {
    case MUSE_TYPE_Q8_1: case MUSE_TYPE_Q8_K: case MUSE_TYPE_I8: case MUSE_TYPE_I16: case MUSE_TYPE_I32: case MUSE_TYPE_I64:
    case MUSE_TYPE_F64:
        return false;
    default:
        return (unsigned)t < MUSE_TYPE_COUNT && muse_type_traits[t].to_float != NULL;
    }
}

static const char *op_name(enum muse_op_kind k) {
    static const char *const names[] = {"BARRIER", "EMBED", "ROPE_ANGLES", "RMS_NORM", "ROPE", "MATMUL", "KV_STORE",
                                        "ATTENTION", "SWIGLU", "ADD", "LOGITS", "TOP_PROBS", "OBSERVE", "ALL_REDUCE",
                                        "LAYER_NORM", "GELU", "GATHER", "ROPE_2D", "WINDOW_ATTENTION", "HOOK"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static muse_status check_weight(const struct muse_weight *w, struct muse_error *err) {
    if (!type_has_shader(w->type))
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: tensor %s: type %s has no Vulkan shader yet (docs/vulkan.md)",
                              w->name ? w->name : "?", muse_type_layouts[w->type].name ? muse_type_layouts[w->type].name : "?");
    if (w->ne0 % 8)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: tensor %s: rows of %lld (the shaders take multiples of 8)",
                              w->name ? w->name : "?", (long long)w->ne0);
    return MUSE_OK;
}

/* Append a host range to upload (grown array). */
static bool add_upl(struct vk_prog *vp, int *cap, const void *host, size_t bytes) {
    if (!host || !bytes) return true;
    if (vp->n_upl == *cap) {
        const int c = *cap ? 2 * *cap : 256;
        struct vk_upl *u = realloc(vp->upl, sizeof *u * (size_t)c);
        if (!u) return false;
        vp->upl = u;
        *cap = c;
    }
    vp->upl[vp->n_upl++] = (struct vk_upl){.host = host, .bytes = bytes};
    return true;
}

static int upl_cmp(const void *a, const void *b) {
    const struct vk_upl *x = a, *y = b;
    if (x->host != y->host) return x->host < y->host ? -1 : 1;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0; /* the largest first */
}

static void wset_free(struct vk *v, struct vk_wset *ws) {
    for (int i = 0; i < ws->n_chunks; i++) muse_vk_buf_destroy(v, &ws->chunks[i]);
    free(ws->chunks);
    free(ws->upl);
    free(ws);
}

/* Drop a program's references; a set nobody reads any more is freed (after the device is idle). */
static void prog_free(struct vk *v, struct vk_prog *vp) {
    bool idle = false;
    for (int i = 0; i < vp->n_sets; i++) {
        struct vk_wset *ws = vp->sets[i];
        if (--ws->refs > 0) continue;
        for (struct vk_wset **q = &v->wsets; *q; q = &(*q)->next)
            if (*q == ws) {
                *q = ws->next;
                break;
            }
        if (!idle && !v->lost) v->fn.vkDeviceWaitIdle(v->dev);
        idle = true;
        v->weight_bytes -= ws->bytes;
        wset_free(v, ws);
    }
    free(vp->sets);
    free(vp->upl);
    free(vp);
}

/* The range of a live set that holds [host, host + bytes), or NULL. */
static const struct vk_upl *wset_find(const struct vk *v, const uint8_t *host, size_t bytes, struct vk_wset **set) {
    for (struct vk_wset *ws = v->wsets; ws; ws = ws->next) {
        int lo = 0, hi = ws->n_upl - 1, best = -1;
        while (lo <= hi) { /* the last range starting at or below host */
            const int mid = (lo + hi) / 2;
            if (ws->upl[mid].host <= host) best = mid, lo = mid + 1;
            else hi = mid - 1;
        }
        if (best >= 0 && host + bytes <= ws->upl[best].host + ws->upl[best].bytes) {
            *set = ws;
            return &ws->upl[best];
        }
    }
    return NULL;
}

/* Upload the ranges of vp that no live set holds into a new set (its chunks: 256-byte aligned
 * ranges with a word of slack after each, for the shaders' word reads), and resolve every range's
 * device address; vp takes a reference to each set it reads. */
static muse_status prog_bind(struct vk *v, struct vk_prog *vp, struct muse_error *err) {
    muse_status st = MUSE_OK;
    struct vk_wset *ws = NULL;
    vp->sets = calloc((size_t)vp->n_upl + 1, sizeof *vp->sets);
    if (!vp->sets) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    int n_new = 0;
    for (int i = 0; i < vp->n_upl; i++) {
        struct vk_wset *set;
        const struct vk_upl *u = wset_find(v, vp->upl[i].host, vp->upl[i].bytes, &set);
        if (!u) {
            vp->upl[i].addr = 0;
            n_new++;
            continue;
        }
        vp->upl[i].addr = set->chunks[u->chunk].addr + u->off + (size_t)(vp->upl[i].host - u->host);
        int k = 0;
        while (k < vp->n_sets && vp->sets[k] != set) k++;
        if (k == vp->n_sets) vp->sets[vp->n_sets++] = set;
    }
    if (n_new) {
        ws = calloc(1, sizeof *ws);
        if (!ws || !(ws->upl = malloc(sizeof *ws->upl * (size_t)n_new))) {
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < vp->n_upl; i++)
            if (!vp->upl[i].addr) ws->upl[ws->n_upl++] = vp->upl[i];
        size_t used = CHUNK_BYTES;
        size_t *sizes = NULL;
        for (int i = 0; i < ws->n_upl; i++) {
            const size_t need = (ws->upl[i].bytes + 4 + 3) & ~(size_t)3;
            if (used + need > CHUNK_BYTES || !ws->n_chunks) {
                size_t *sz = realloc(sizes, sizeof *sz * (size_t)(ws->n_chunks + 1));
                if (!sz) {
                    free(sizes);
                    st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
                    goto fail;
                }
                sizes = sz;
                sizes[ws->n_chunks++] = 0;
                used = 0;
            }
            ws->upl[i].chunk = ws->n_chunks - 1;
            ws->upl[i].off = used;
            used = (used + need + 255) & ~(size_t)255;
            sizes[ws->n_chunks - 1] = used;
            ws->bytes += need;
        }
        ws->chunks = calloc((size_t)ws->n_chunks, sizeof *ws->chunks);
        if (!ws->chunks) {
            free(sizes);
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int c = 0; c < ws->n_chunks && !st; c++) st = muse_vk_buf_create(v, sizes[c], false, &ws->chunks[c], err);
        free(sizes);
        if (st) {
            muse_error_prefix(err, "the weights (%.1f MiB): ", (double)ws->bytes / (1 << 20));
            goto fail;
        }
        for (int i = 0; i < ws->n_upl && !st; i++)
            st = muse_vk_upload(v, ws->chunks[ws->upl[i].chunk].buf, ws->upl[i].off, ws->upl[i].host, ws->upl[i].bytes, err);
        if (st) goto fail;
        for (int i = 0, j = 0; i < vp->n_upl; i++)
            if (!vp->upl[i].addr) {
                vp->upl[i].addr = ws->chunks[ws->upl[j].chunk].addr + ws->upl[j].off;
                j++;
            }
        ws->next = v->wsets;
        v->wsets = ws;
        v->weight_bytes += ws->bytes;
        v->weight_uploads++;
        vp->sets[vp->n_sets++] = ws;
    }
    for (int k = 0; k < vp->n_sets; k++) vp->sets[k]->refs++;
    return MUSE_OK;
fail:
    if (ws) wset_free(v, ws);
    vp->n_sets = 0;
    return st;
}

muse_status muse_vk_prepare(void *ks, struct muse_program *p, struct muse_error *err) {
    struct vk *v = ks;
    muse_status st = MUSE_OK;
    for (struct vk_prog *q = v->progs; q; q = q->next)
        if (q->p == p) return MUSE_OK;
    for (int32_t b = MUSE_BUF_FIRST; b < p->n_bufs; b++)
        if (p->bufs[b].bind)
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: programs with caller-bound buffers (the vision tower) are not supported yet");
    struct vk_prog *vp = calloc(1, sizeof *vp);
    if (!vp) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    vp->p = p;
    int cap = 0;
    bool ok = true;
    for (int32_t i = 0; i < p->n_ops && !st; i++) {
        const struct muse_op *o = &p->ops[i];
        switch (o->kind) {
        case MUSE_OP_BARRIER: case MUSE_OP_ROPE_ANGLES: case MUSE_OP_ROPE: case MUSE_OP_KV_STORE: case MUSE_OP_SWIGLU:
        case MUSE_OP_ADD: case MUSE_OP_LOGITS: case MUSE_OP_OBSERVE: case MUSE_OP_ALL_REDUCE:
            if (o->count) st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: %s over explicit row ranges is not supported yet", op_name(o->kind));
            break;
        case MUSE_OP_EMBED:
            if (!(st = check_weight(o->table, err))) ok &= add_upl(vp, &cap, o->table->data, (size_t)o->table->ne1 * o->table->row_size);
            break;
        case MUSE_OP_RMS_NORM:
            ok &= add_upl(vp, &cap, o->w, sizeof(float) * (size_t)o->n);
            break;
        case MUSE_OP_ATTENTION:
            if (o->mask != MUSE_MASK_CAUSAL)
                st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: the block attention mask (the DFlash drafter) is not supported yet");
            else if (o->head_dim > 512 || o->n_head_kv <= 0 || o->n_head % o->n_head_kv)
                st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: attention with %d heads of %d over %d KV heads is not supported",
                                    o->n_head, o->head_dim, o->n_head_kv);
            break;
        case MUSE_OP_MATMUL:
            for (int32_t j = 0; j < o->n_jobs && !st; j++) {
                const struct muse_prog_job *pj = &p->jobs[o->job0 + j];
                if ((st = check_weight(&pj->w, err))) break;
                ok &= add_upl(vp, &cap, pj->w.data, (size_t)pj->w.ne1 * pj->w.row_size);
                ok &= add_upl(vp, &cap, pj->bias, sizeof(float) * (size_t)pj->w.ne1);
            }
            break;
        default:
            st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: op %s has no Vulkan shader yet (docs/vulkan.md)", op_name(o->kind));
        }
    }
    if (!st && !ok) st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (st) goto fail;
    /* one copy of each range (the same pointer twice: a tied embedding, a weight read by two ops) */
    qsort(vp->upl, (size_t)vp->n_upl, sizeof *vp->upl, upl_cmp);
    int n = 0;
    for (int i = 0; i < vp->n_upl; i++) {
        if (n && vp->upl[i].host < vp->upl[n - 1].host + vp->upl[n - 1].bytes) { /* inside the previous range */
            const uint8_t *end = vp->upl[i].host + vp->upl[i].bytes;
            if (end > vp->upl[n - 1].host + vp->upl[n - 1].bytes) vp->upl[n - 1].bytes = (size_t)(end - vp->upl[n - 1].host);
            continue;
        }
        vp->upl[n++] = vp->upl[i];
    }
    vp->n_upl = n;
    if ((st = prog_bind(v, vp, err))) goto fail;
    vp->next = v->progs;
    v->progs = vp;
    return MUSE_OK;
fail:
    prog_free(v, vp);
    return st;
}

void muse_vk_forget(void *ks, const struct muse_program *p) {
    struct vk *v = ks;
    for (struct vk_prog **q = &v->progs; *q; q = &(*q)->next)
        if ((*q)->p == p) {
            struct vk_prog *vp = *q;
            *q = vp->next;
            if (!v->lost) v->fn.vkDeviceWaitIdle(v->dev);
            muse_vk_replay_clear(v);
            prog_free(v, vp);
            return;
        }
}

void muse_vk_forget_all(struct vk *v) {
    while (v->progs) {
        struct vk_prog *vp = v->progs;
        v->progs = vp->next;
        prog_free(v, vp);
    }
}

void muse_vk_stats(void *ks, struct muse_device_stats *s) {
    const struct vk *v = ks;
    s->weight_bytes = v->weight_bytes;
    s->weight_uploads = v->weight_uploads;
    s->decode_records = v->records;
    s->decode_replays = v->replays;
}

/* The device address of host range `host` of a prepared program (0: not uploaded). */
static VkDeviceAddress weight_addr(const struct vk_prog *vp, const void *host) {
    const uint8_t *h = host;
    int lo = 0, hi = vp->n_upl - 1, best = -1;
    while (lo <= hi) { /* the last range starting at or below h */
        const int mid = (lo + hi) / 2;
        if (vp->upl[mid].host <= h) best = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (best < 0 || h >= vp->upl[best].host + vp->upl[best].bytes) return 0;
    return vp->upl[best].addr + (size_t)(h - vp->upl[best].host);
}

// ---- run ----------------------------------------------------------------------------------------

struct rec {
    struct vk *v;
    const struct vk_prog *vp;
    const struct muse_program *p;
    const struct muse_prog_run *run;
    struct muse_error *err;
    muse_status st;
    bool no_barrier;   /* the next matmul dispatch needs no barrier after it (op_matmul) */
    const char *label; /* the profiler's name for the next dispatch (NULL: the shader's) */
    double bytes;      /* and the weight bytes it reads */
    /* io (inputs) and out (outputs) offsets, bytes */
    size_t tokens, src, pos, out_rows, rope, inj, logits, embd, features;
};

static VkDeviceAddress ref_addr(const struct rec *R, struct muse_prog_ref f) {
    if (f.buf == MUSE_BUF_LOGITS) return R->v->out.addr + R->logits + (size_t)f.off * 4;
    if (f.buf == MUSE_BUF_EMBD) return R->v->out.addr + R->embd + (size_t)f.off * 4;
    return R->v->ws.addr + (R->p->bufs[f.buf].off + (size_t)f.off) * 4;
}

static uint32_t ref_stride(const struct rec *R, struct muse_prog_ref f) {
    return (uint32_t)(f.stride ? f.stride : R->p->bufs[f.buf].cols);
}

static void dispatch(struct rec *R, enum vk_shader sh, uint32_t spec, const void *pc, size_t size, uint32_t x, uint32_t y,
                     uint32_t z) {
    struct vk *v = R->v;
    if (R->st || !x || !y || !z) return;
    VkPipeline pipe = muse_vk_pipeline(v, sh, spec, R->err);
    if (!pipe) {
        R->st = R->err ? R->err->status : MUSE_ERR_IO;
        if (!R->st) R->st = MUSE_ERR_IO;
        return;
    }
    v->fn.vkCmdBindPipeline(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    v->fn.vkCmdPushConstants(v->cb, v->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)size, pc);
    v->fn.vkCmdDispatch(v->cb, x, y, z);
    if (!R->no_barrier || sh == SH_ACT_QUANT) muse_vk_barrier(v); /* no_barrier: op_matmul's matmuls only */
    if (v->prof) {
        char lab[56];
        snprintf(lab, sizeof lab, "%s %s", R->run->n_rows <= 8 ? "tg" : "pp", R->label ? R->label : muse_vk_shader_name(sh));
        muse_vk_prof_stamp(v, lab, R->bytes);
    }
    R->label = NULL;
    R->bytes = 0;
    if (sh != SH_ACT_QUANT) R->no_barrier = false;
}

/* y (n floats per row, n_rows rows) op= x, by eltwise.comp's OP. */
static void eltwise(struct rec *R, uint32_t op, VkDeviceAddress y, uint32_t ys, VkDeviceAddress x, uint32_t xs, uint32_t n,
                    uint32_t n_rows, float scale, float softcap) {
    const struct {
        a64 y, x;
        uint32_t n, ys, xs, n_rows;
        float scale, softcap, inv_cap;
    } pc = {A(y), A(x), n, ys, xs, n_rows, scale, softcap, softcap != 0.0f ? 1.0f / softcap : 0.0f};
    dispatch(R, SH_ELTWISE, op, &pc, sizeof pc, (n + 63) / 64, n_rows < 32768 ? n_rows : 32768, (n_rows + 32767) / 32768);
}

static int32_t op_rows(const struct rec *R, const struct muse_op *o) {
    return o->rows == MUSE_ROWS_OUT ? R->run->n_out : R->run->n_rows;
}

static VkDeviceAddress kv_addr(struct rec *R, const void *ptr) {
    struct vk *v = R->v;
    for (int i = 0; i < v->n_bufs; i++) {
        const struct muse_buffer *b = v->bufs[i];
        if ((const uint8_t *)ptr >= (const uint8_t *)b->base && (const uint8_t *)ptr < (const uint8_t *)b->base + b->size)
            return ((const struct vk_buf *)b->handle)->addr + (size_t)((const uint8_t *)ptr - (const uint8_t *)b->base);
    }
    if (!R->st)
        R->st = muse_error_set(R->err, MUSE_ERR_INTERNAL, "vulkan: a KV cache that is not in this device's memory");
    return 0;
}

static void op_embed(struct rec *R, const struct muse_op *o) {
    const struct muse_weight *t = o->table;
    const struct {
        a64 table, tokens, src, inj, dst, tab;
        uint32_t n, row_size, ds, n_rows;
    } pc = {A(weight_addr(R->vp, t->data)), A(R->v->io.addr + R->tokens), A(R->v->io.addr + R->src),
            A(R->v->io.addr + R->inj), A(ref_addr(R, o->dst)), A(R->v->tab.addr), (uint32_t)o->n, (uint32_t)t->row_size,
            ref_stride(R, o->dst), (uint32_t)R->run->n_rows};
    dispatch(R, SH_EMBED, (uint32_t)t->type, &pc, sizeof pc, (uint32_t)R->run->n_rows, 1, 1);
}

static void op_rms_norm(struct rec *R, const struct muse_op *o) {
    const uint32_t n_vec = (uint32_t)op_rows(R, o) * (uint32_t)(o->per_row ? o->per_row : 1);
    const struct {
        a64 x, y, w, rows;
        uint32_t n, per_row, xs, ys, flags, n_vec;
        float eps;
    } pc = {A(ref_addr(R, o->src)), A(ref_addr(R, o->dst)), A(o->w ? weight_addr(R->vp, o->w) : 0),
            A(R->v->io.addr + R->out_rows), (uint32_t)o->n, (uint32_t)(o->per_row ? o->per_row : 1), ref_stride(R, o->src),
            ref_stride(R, o->dst), (o->w ? 1u : 0u) | (o->rows == MUSE_ROWS_OUT ? 2u : 0u), n_vec, o->eps};
    dispatch(R, SH_RMS_NORM, 0, &pc, sizeof pc, n_vec < 32768 ? n_vec : 32768, (n_vec + 32767) / 32768, 1);
}

static void op_rope(struct rec *R, const struct muse_op *o) {
    const uint32_t n_vec = (uint32_t)R->run->n_rows * (uint32_t)o->per_row;
    const struct {
        a64 x, c, s;
        uint32_t xs, hd, per_row, n_rot, cs, neox, n_vec;
    } pc = {A(ref_addr(R, o->dst)), A(ref_addr(R, o->src)), A(ref_addr(R, o->src2)), ref_stride(R, o->dst), (uint32_t)o->n,
            (uint32_t)o->per_row, (uint32_t)o->n_rot, ref_stride(R, o->src), o->rope == MUSE_ROPE_NEOX, n_vec};
    dispatch(R, SH_ROPE, 0, &pc, sizeof pc, n_vec < 32768 ? n_vec : 32768, (n_vec + 32767) / 32768, 1);
}

enum { VAR_PLAIN, VAR_F16, VAR_DP4A, VAR_COOPMAT, VAR_VEC };

/* The matmul variant for weights of type t over n rows (docs/vulkan.md "Fast variants"): on a GPU
 * the fastest the device has features for (cooperative matrices for prefill; for decode, int8 dot
 * against Q8_K for Q4_K, Q6_K and IQ2_XXS; int8 dot for Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4; fp16
 * arithmetic), the plain path on a CPU driver; MUSE_VK_VARIANT=plain|f16|dp4a|coopmat|vec forces one
 * where the device and the shape allow it, plain otherwise. */
static int matmul_variant(const struct vk *v, enum muse_type t, uint32_t n, uint32_t ne0, VkDeviceAddress w) {
    const char *e = getenv("MUSE_VK_VARIANT");
    const bool forced = e && *e && strcmp(e, "auto"), gpu = v->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (v->can_cm && n >= 16 && ne0 % 32 == 0 && (forced ? !strcmp(e, "coopmat") : gpu)) return VAR_COOPMAT;
    /* 256-blocks against Q8_K; Q4_K blocks are read 16 bytes at a time */
    const bool vec = (t == MUSE_TYPE_Q4_K && w % 16 == 0) || t == MUSE_TYPE_Q6_K || t == MUSE_TYPE_IQ2_XXS;
    if (v->can_dot && vec && n <= 8 && ne0 % 256 == 0 && (forced ? !strcmp(e, "vec") : gpu)) return VAR_VEC;
    const bool int8 = t == MUSE_TYPE_Q8_0 || t == MUSE_TYPE_Q4_0 || t == MUSE_TYPE_Q5_0 || t == MUSE_TYPE_IQ4_NL ||
                      t == MUSE_TYPE_MXFP4; /* an int8 code times one scale per 32 */
    if (v->can_dot && int8 && (forced ? !strcmp(e, "dp4a") : gpu)) return VAR_DP4A;
    if (v->can_f16 && (forced ? !strcmp(e, "f16") : gpu)) return VAR_F16;
    return VAR_PLAIN;
}

/* The act_quant.comp pass a job's matmul reads (UINT32_MAX: none, the raw activations): packed
 * int8 rows (dp4a: Q8_0, vec: Q8_K), else the activations rounded as the cpu does (coopmat too:
 * the tile takes them to f16). */
static uint32_t job_qspec(const struct rec *R, const struct muse_prog_job *pj, uint32_t n) {
    const enum muse_type at = muse_type_traits[pj->w.type].vec_dot_type;
    const int var = matmul_variant(R->v, pj->w.type, n, (uint32_t)pj->w.ne0, weight_addr(R->vp, pj->w.data));
    return var == VAR_DP4A ? (uint32_t)MUSE_TYPE_Q8_0 | 1u << 16
           : var == VAR_VEC ? (uint32_t)MUSE_TYPE_Q8_K | 1u << 16
           : at != MUSE_TYPE_F32 ? (uint32_t)at : UINT32_MAX;
}

/* MATMUL: per job, by its variant: the activations rounded to the weight type's vec_dot_type as
 * the cpu does (act_quant.comp into xq, once per type in a row of jobs) and matmul.comp (plain),
 * matmul_f16.comp or matmul_coopmat.comp; the activations packed as Q8_0 (dp4a) or Q8_K (vec) codes
 * and matmul_dp4a.comp or matmul_vec.comp. */
static void op_matmul(struct rec *R, const struct muse_op *o) {
    const uint32_t n = (uint32_t)op_rows(R, o);
    if (!n) return;
    uint32_t done = UINT32_MAX; /* what xq holds: the act_quant spec of the last pass */
    /* the act_quant spec of this job and of the next (each job's computed once) */
    uint32_t qspec = o->n_jobs ? job_qspec(R, &R->p->jobs[o->job0], n) : UINT32_MAX, next = UINT32_MAX;
    for (int32_t j = 0; j < o->n_jobs; j++, qspec = next) {
        const struct muse_prog_job *pj = &R->p->jobs[o->job0 + j];
        const uint32_t ne0 = (uint32_t)pj->w.ne0, ne1 = (uint32_t)pj->w.ne1;
        const int var = matmul_variant(R->v, pj->w.type, n, ne0, weight_addr(R->vp, pj->w.data));
        VkDeviceAddress x = ref_addr(R, o->src);
        uint32_t xs = ref_stride(R, o->src);
        /* the jobs of one op read the same input and write distinct outputs: no barrier between
         * two matmuls unless the next job rewrites xq (another act_quant pass) */
        next = j + 1 < o->n_jobs ? job_qspec(R, &R->p->jobs[o->job0 + j + 1], n) : UINT32_MAX;
        R->no_barrier = j + 1 < o->n_jobs && next == qspec;
        if (qspec != UINT32_MAX) {
            if ((size_t)n * ne0 * 4 > R->v->xq.size) {
                if (!R->st) R->st = muse_error_set(R->err, MUSE_ERR_INTERNAL, "vulkan: a matmul larger than the reserved plan");
                return;
            }
            if (qspec != done) {
                const struct {
                    a64 x, y;
                    uint32_t ne0, xs;
                } qc = {A(x), A(R->v->xq.addr), ne0, xs};
                /* act_quant.comp's workgroups per row: 64 values (F16, BF16), 64 blocks of 32, a 256-block */
                const enum muse_type aq = (enum muse_type)(qspec & 0xffff);
                const uint32_t gx = aq == MUSE_TYPE_Q8_K ? ne0 / 256
                                    : aq == MUSE_TYPE_Q8_0 || aq == MUSE_TYPE_Q8_1 ? (ne0 / 32 + 63) / 64
                                                                               : (ne0 + 63) / 64;
                char ql[56];
                if (R->v->prof) {
                    snprintf(ql, sizeof ql, "act_quant %s", muse_type_layouts[aq].name);
                    R->label = ql;
                }
                dispatch(R, SH_ACT_QUANT, qspec, &qc, sizeof qc, gx, n, 1);
                done = qspec;
            }
            x = R->v->xq.addr;
            xs = var == VAR_DP4A ? ne0 / 4 + ne0 / 32 : var == VAR_VEC ? (ne0 / 4 + ne0 / 256 + ne0 / 16 + 3) & ~3u : ne0;
        }
        const struct {
            a64 w, x, y, bias, tab;
            uint32_t ne0, ne1, row_size, n_rows, xs, ys, flags;
            float scale;
        } pc = {A(weight_addr(R->vp, pj->w.data)), A(x), A(ref_addr(R, pj->y)),
                A(pj->bias ? weight_addr(R->vp, pj->bias) : 0), A(R->v->tab.addr), ne0, ne1,
                (uint32_t)pj->w.row_size, n, xs, ref_stride(R, pj->y),
                (pj->has_scale ? 1u : 0u) | (pj->bias ? 2u : 0u), pj->scale};
        char lab[56];
        if (R->v->prof) {
            static const char *const vn[] = {"matmul", "matmul_f16", "matmul_dp4a", "matmul_coopmat", "matmul_vec"};
            snprintf(lab, sizeof lab, "%s %s %ux%u", vn[var], muse_type_layouts[pj->w.type].name, ne1, ne0);
            R->label = lab;
            R->bytes = (double)ne1 * (double)pj->w.row_size;
        }
        if (var == VAR_COOPMAT) {
            const uint32_t nwg = (ne1 + 63) / 64; /* 64 x 64 tiles */
            dispatch(R, SH_MATMUL_COOPMAT, (uint32_t)pj->w.type, &pc, sizeof pc, nwg < 32768 ? nwg : 32768, (n + 63) / 64,
                     (nwg + 32767) / 32768);
            continue;
        }
        if (var == VAR_VEC) { /* 8 output rows per workgroup (4 of 64 lanes below 1024), every token row (n <= 8) */
            const uint32_t lpr64 = ne1 < 1024, nwg = lpr64 ? (ne1 + 3) / 4 : (ne1 + 7) / 8;
            dispatch(R, SH_MATMUL_VEC, (uint32_t)pj->w.type | (R->v->sg | lpr64 << 8) << 16, &pc, sizeof pc,
                     nwg < 32768 ? nwg : 32768, 1,
                     (nwg + 32767) / 32768);
            continue;
        }
        static const enum vk_shader sh[] = {[VAR_PLAIN] = SH_MATMUL, [VAR_F16] = SH_MATMUL_F16, [VAR_DP4A] = SH_MATMUL_DP4A};
        const uint32_t tpr = R->v->mm_tpr, nwg = (ne1 + 64 / tpr - 1) / (64 / tpr);
        dispatch(R, sh[var], (uint32_t)pj->w.type | tpr << 16, &pc, sizeof pc, nwg < 32768 ? nwg : 32768, (n + 7) / 8,
                 (nwg + 32767) / 32768);
    }
}

/* kv_store.comp / attention.comp's kt: 0 F32, 1 F16, 2 Q8_0 */
static uint32_t kv_kind(enum muse_type t) { return t == MUSE_TYPE_F16 ? 1u : t == MUSE_TYPE_Q8_0 ? 2u : 0u; }

/* The shaders address cells by 32-bit words (and Q8_0 rows through shared memory of 8704 bytes). */
static bool kv_type_ok(struct rec *R, const struct muse_kv_layer *l) {
    const bool q8 = l->type == MUSE_TYPE_Q8_0;
    if (l->k_row_size % 4 || l->v_row_size % 4 || (q8 && (l->k_row_size > 8704 || l->v_row_size > 8704))) {
        if (!R->st)
            R->st = muse_error_set(R->err, MUSE_ERR_UNSUPPORTED, "vulkan: a %s KV cache with rows of %zu / %zu bytes is not supported",
                                   q8 ? "q8_0" : l->type == MUSE_TYPE_F16 ? "f16" : "f32", l->k_row_size, l->v_row_size);
        return false;
    }
    return true;
}

static void op_kv_store(struct rec *R, const struct muse_op *o) {
    const struct muse_prog_run *run = R->run;
    const uint32_t ks = ref_stride(R, o->src), vs = ref_stride(R, o->src2);
    for (int32_t r0 = 0, r1; r0 < run->n_rows && !R->st; r0 = r1) {
        const int32_t s = run->seq ? run->seq[r0] : 0;
        for (r1 = r0 + 1; r1 < run->n_rows && (run->seq ? run->seq[r1] : 0) == s; r1++) {}
        const struct muse_kv_layer *l = &run->kv[s][o->layer];
        if (!kv_type_ok(R, l)) return;
        const struct {
            a64 k, v, kd, vd, pos;
            uint32_t ks, vs, nk, nv, n_cells, krow, vrow, kt;
        } pc = {A(ref_addr(R, o->src) + (size_t)r0 * ks * 4), A(ref_addr(R, o->src2) + (size_t)r0 * vs * 4), A(kv_addr(R, l->k)),
                A(kv_addr(R, l->v)), A(R->v->io.addr + R->pos + (size_t)r0 * 4), ks, vs, (uint32_t)l->n_embd_k,
                (uint32_t)l->n_embd_v, l->n_cells, (uint32_t)(l->k_row_size / 4), (uint32_t)(l->v_row_size / 4),
                kv_kind(l->type)};
        dispatch(R, SH_KV_STORE, 0, &pc, sizeof pc, (uint32_t)(r1 - r0), 2, 1);
    }
}

static void op_attention(struct rec *R, const struct muse_op *o) {
    const struct muse_prog_run *run = R->run;
    const uint32_t qs = (uint32_t)o->n_head * (uint32_t)o->head_dim;
    for (int32_t r0 = 0, r1; r0 < run->n_rows && !R->st; r0 = r1) {
        const int32_t s = run->seq ? run->seq[r0] : 0;
        for (r1 = r0 + 1; r1 < run->n_rows && (run->seq ? run->seq[r1] : 0) == s; r1++) {}
        const struct muse_kv_layer *l = &run->kv[s][o->layer];
        if (!kv_type_ok(R, l)) return;
        const VkDeviceAddress off = (size_t)r0 * qs * 4;
        const struct {
            a64 q, out, gate, k, v, pos;
            uint32_t n_head, n_head_kv, hd, n_cells, n_swa, krow, vrow, qs, kt, flags;
            float scale;
        } pc = {A(ref_addr(R, o->src) + off), A(ref_addr(R, o->dst) + off),
                A(o->src2.buf != MUSE_BUF_NONE ? ref_addr(R, o->src2) + off : 0), A(kv_addr(R, l->k)), A(kv_addr(R, l->v)),
                A(R->v->io.addr + R->pos + (size_t)r0 * 4), (uint32_t)o->n_head, (uint32_t)o->n_head_kv,
                (uint32_t)o->head_dim, l->n_cells, (uint32_t)o->n_swa, (uint32_t)(l->k_row_size / 4),
                (uint32_t)(l->v_row_size / 4), qs, kv_kind(l->type), o->src2.buf != MUSE_BUF_NONE ? 1u : 0u, o->scale};
        dispatch(R, SH_ATTENTION, 0, &pc, sizeof pc, (uint32_t)o->n_head, (uint32_t)(r1 - r0), 1);
    }
}

static void op_observe(struct rec *R, const struct muse_op *o) {
    const struct muse_prog_run *a = R->run;
    if (!a->features) return;
    const size_t E = (size_t)a->n_embd, F = (size_t)a->n_features * E;
    for (int32_t k = 0; k < a->n_features; k++)
        if (a->feature_layers[k] == o->layer)
            eltwise(R, EW_COPY, R->v->out.addr + R->features + (size_t)k * E * 4, (uint32_t)F, ref_addr(R, o->src),
                    ref_stride(R, o->src), (uint32_t)E, (uint32_t)a->n_rows, 0, 0);
}

/* The run's inputs into io, the output layout of out. */
static muse_status layout(struct rec *R) {
    struct vk *v = R->v;
    const struct muse_program *p = R->p;
    const struct muse_prog_run *run = R->run;
    const size_t nr = (size_t)run->n_rows;
    size_t o = 0;
#define TAKE(field, bytes) (R->field = o, o = (o + (bytes) + 63) & ~(size_t)63)
    TAKE(tokens, nr * 4);
    TAKE(src, nr * 4);
    TAKE(pos, nr * 4);
    TAKE(out_rows, (size_t)(run->n_out > 0 ? run->n_out : 1) * 4);
    size_t rope_bytes = 0, inj_rows = 0;
    int64_t n_embd = 0;
    for (int32_t i = 0; i < p->n_ops; i++) {
        const struct muse_op *op = &p->ops[i];
        if (op->kind == MUSE_OP_ROPE_ANGLES) rope_bytes += 2 * nr * (size_t)p->bufs[op->dst.buf].cols * 4;
        if (op->kind == MUSE_OP_EMBED) n_embd = op->n;
    }
    for (size_t r = 0; r < nr; r++)
        if ((run->rows && run->rows[r]) || run->embd) inj_rows++;
    TAKE(rope, rope_bytes);
    TAKE(inj, inj_rows * (size_t)n_embd * 4);
    muse_status st = muse_vk_buf_ensure(v, &v->io, o, R->err);
    if (st) return st;
    uint8_t *io = v->io.map;
    int32_t *tok = (int32_t *)(io + R->tokens), *src = (int32_t *)(io + R->src);
    float *inj = (float *)(io + R->inj);
    int32_t k = 0;
    for (size_t r = 0; r < nr; r++) {
        const float *row = run->rows && run->rows[r] ? run->rows[r] : run->embd ? run->embd + r * (size_t)n_embd : NULL;
        tok[r] = run->tokens && !row ? run->tokens[r] : 0;
        src[r] = row ? k : -1;
        if (row) memcpy(inj + (size_t)k++ * (size_t)n_embd, row, sizeof(float) * (size_t)n_embd);
    }
    memcpy(io + R->pos, run->pos, nr * 4);
    if (run->n_out > 0) memcpy(io + R->out_rows, run->out_rows, (size_t)run->n_out * 4);
    size_t ro = R->rope;
    for (int32_t i = 0; i < p->n_ops; i++) { /* the rope angles, on the host (the CPU's bits) */
        const struct muse_op *op = &p->ops[i];
        if (op->kind != MUSE_OP_ROPE_ANGLES) continue;
        const size_t cols = (size_t)p->bufs[op->dst.buf].cols;
        float *c = (float *)(io + ro), *s = c + nr * cols;
        for (size_t r = 0; r < nr; r++)
            muse_rope_angles((float)run->pos[r], op->n_rot, op->rope_base, op->rope_scale, c + r * cols, s + r * cols);
        ro += 2 * nr * cols * 4;
    }
    o = 0;
    TAKE(logits, (size_t)(run->n_out > 0 ? run->n_out : 0) * (size_t)p->bufs[MUSE_BUF_LOGITS].cols * 4);
    TAKE(embd, run->embd_out ? nr * (size_t)p->bufs[MUSE_BUF_EMBD].cols * 4 : 0);
    TAKE(features, run->features ? nr * (size_t)run->n_features * (size_t)run->n_embd * 4 : 0);
#undef TAKE
    return muse_vk_buf_ensure(v, &v->out, o, R->err);
}

static muse_status copy_out(const struct rec *R);

/* The recorded decode step of this run's shape (*hit), or the slot to record it in (NULL: none).
 * The shape of a decode step: everything its recording bakes in (the program, the row and output
 * counts, the io / out layout and the buffers' addresses, which outputs, each row's sequence and
 * the KV arrays its layers bind). Equal keys record equal command buffers. */
#define RP_MAX_ROWS 8
#define RP_MAX_FEATURES 16
static struct vk_replay *replay_find(struct rec *R, struct vk *v, bool *hit) {
    const struct muse_prog_run *run = R->run;
    size_t n = 0;
    uint64_t k[VK_REPLAY_KEY];
    _Static_assert(33 + RP_MAX_FEATURES + 2 * RP_MAX_ROWS <= VK_REPLAY_KEY, "the longest key fits");
#define K(x) (k[n++] = (uint64_t)(x))
    K((uintptr_t)R->p), K(run->n_rows), K(run->n_out), K(R->tokens), K(R->src), K(R->pos), K(R->out_rows), K(R->rope),
        K(R->inj), K(R->logits), K(R->embd), K(R->features), K(v->io.addr), K(v->out.addr), K(v->ws.addr), K(v->xq.addr),
        K(run->logits != NULL), K(run->embd_out != NULL), K(run->features ? run->n_features : -1);
    for (int32_t i = 0; run->features && i < run->n_features; i++) K(run->feature_layers[i]); /* <= RP_MAX_FEATURES */
    for (int32_t r = 0; r < run->n_rows; r++) K(run->seq ? run->seq[r] : 0);
    uint64_t hv = 1469598103934665603ull; /* the variant a recording chose (MUSE_VK_VARIANT) */
    for (const char *e = getenv("MUSE_VK_VARIANT"); e && *e; e++) hv = (hv ^ (uint8_t)*e) * 1099511628211ull;
    K(hv);
    /* the KV layers each sequence binds: hashed (FNV-1a) per sequence, so that the key stays short */
    for (int32_t r = 0; r < run->n_rows; r++) {
        const int32_t s = run->seq ? run->seq[r] : 0;
        if (r && s == (run->seq ? run->seq[r - 1] : 0)) continue;
        uint64_t h = 1469598103934665603ull;
        for (int32_t i = 0; i < R->p->n_ops; i++) {
            const struct muse_op *o = &R->p->ops[i];
            if (o->kind != MUSE_OP_KV_STORE) continue;
            const struct muse_kv_layer *l = &run->kv[s][o->layer];
            const uint64_t f[5] = {(uintptr_t)l->k, (uintptr_t)l->v, l->n_cells, (uint64_t)l->type, l->k_row_size};
            for (int j = 0; j < 5; j++) h = (h ^ f[j]) * 1099511628211ull;
        }
        K(h);
    }
#undef K
    /* a recording of this shape, else the slot to record it in: an empty one, else the least recent */
    struct vk_replay *slot = &v->rp[0];
    for (int i = 0; i < VK_REPLAY_SLOTS; i++) {
        struct vk_replay *e = &v->rp[i];
        if (e->valid && e->n == n && !memcmp(e->key, k, n * sizeof *k)) {
            e->used = ++v->rp_tick;
            *hit = true;
            return e;
        }
        if (slot->valid && (!e->valid || e->used < slot->used)) slot = e;
    }
    *hit = false;
    if (!slot->pool) {
        const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = v->qfam};
        if (v->fn.vkCreateCommandPool(v->dev, &cpi, NULL, &slot->pool) != VK_SUCCESS) return slot->pool = VK_NULL_HANDLE, NULL;
        const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = slot->pool,
                                                 .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
        if (v->fn.vkAllocateCommandBuffers(v->dev, &cai, &slot->cb) != VK_SUCCESS) {
            v->fn.vkDestroyCommandPool(v->dev, slot->pool, NULL);
            slot->pool = VK_NULL_HANDLE;
            return NULL;
        }
    }
    slot->valid = false;
    memcpy(slot->key, k, n * sizeof *k);
    slot->n = n;
    slot->used = ++v->rp_tick;
    return slot;
}

void muse_vk_replay_clear(struct vk *v) {
    for (int i = 0; i < VK_REPLAY_SLOTS; i++) v->rp[i].valid = false;
}

muse_status muse_vk_run(void *ks, const struct muse_program *p, const struct muse_prog_run *run, struct muse_error *err) {
    struct vk *v = ks;
    if (v->lost) return muse_error_set(err, MUSE_ERR_IO, "vulkan: %s was lost earlier; reopen the model", v->props.deviceName);
    const struct vk_prog *vp = v->progs;
    while (vp && vp->p != p) vp = vp->next;
    if (!vp) return muse_error_set(err, MUSE_ERR_INTERNAL, "vulkan: a program that was not prepared (muse_device_prepare)");
    if (run->trace || run->capture || run->hook || run->bind)
        return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                              "vulkan: layer traces, capture hooks and bound buffers run on the cpu and ref backends only");
    if (p->workspace_floats * 4 > v->ws.size)
        return muse_error_set(err, MUSE_ERR_INTERNAL, "vulkan: the workspace was not reserved for this program");
    struct rec R = {.v = v, .vp = vp, .p = p, .run = run, .err = err};
    muse_status st = layout(&R);
    if (st) return st;
    /* a decode step (a few token rows) replays the command buffer recorded for its shape: its
     * inputs (tokens, positions, rope angles, output rows) are read from io, which layout() wrote */
    const char *rp = getenv("MUSE_VK_REPLAY"); /* "0": every run recorded afresh */
    const bool decode = !(rp && !strcmp(rp, "0")) && !v->prof && run->n_rows <= RP_MAX_ROWS && !run->embd && !run->rows && run->tokens &&
                        (!run->features || run->n_features <= RP_MAX_FEATURES);
    bool hit = false;
    struct vk_replay *slot = decode ? replay_find(&R, v, &hit) : NULL;
    if (slot && hit) {
        v->replays++;
        if ((st = muse_vk_submit_cb(v, slot->cb, err))) return st;
        return copy_out(&R);
    }
    const VkCommandBuffer one = v->cb;
    if (slot) { /* record this shape into the slot's command buffer, kept for the next step */
        v->fn.vkResetCommandPool(v->dev, slot->pool, 0);
        const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        v->fn.vkBeginCommandBuffer(slot->cb, &bi);
        v->cb = slot->cb;
    } else {
        muse_vk_begin(v);
    }
    if (v->prof) { /* the run's first timestamp: each dispatch's time is the step to its own */
        v->fn.vkCmdResetQueryPool(v->cb, v->qp, 0, VK_PROF_QUERIES);
        v->q_n = 0;
        muse_vk_prof_stamp(v, NULL, 0);
    }
    size_t ro = R.rope;
    for (int32_t i = 0; i < p->n_ops && !R.st; i++) {
        const struct muse_op *o = &p->ops[i];
        switch (o->kind) {
        case MUSE_OP_BARRIER: case MUSE_OP_ALL_REDUCE: break; /* a barrier follows every dispatch; one device */
        case MUSE_OP_EMBED: op_embed(&R, o); break;
        case MUSE_OP_ROPE_ANGLES: {
            const uint32_t cols = (uint32_t)p->bufs[o->dst.buf].cols, nr = (uint32_t)run->n_rows;
            eltwise(&R, EW_COPY, ref_addr(&R, o->dst), cols, v->io.addr + ro, cols, cols, nr, 0, 0);
            eltwise(&R, EW_COPY, ref_addr(&R, o->src), cols, v->io.addr + ro + (size_t)nr * cols * 4, cols, cols, nr, 0, 0);
            ro += 2 * (size_t)nr * cols * 4;
            break;
        }
        case MUSE_OP_RMS_NORM: op_rms_norm(&R, o); break;
        case MUSE_OP_ROPE: op_rope(&R, o); break;
        case MUSE_OP_MATMUL: op_matmul(&R, o); break;
        case MUSE_OP_KV_STORE: op_kv_store(&R, o); break;
        case MUSE_OP_ATTENTION: op_attention(&R, o); break;
        case MUSE_OP_SWIGLU:
            eltwise(&R, EW_SWIGLU, ref_addr(&R, o->dst), ref_stride(&R, o->dst), ref_addr(&R, o->src), ref_stride(&R, o->src),
                    (uint32_t)o->n, (uint32_t)run->n_rows, 0, 0);
            break;
        case MUSE_OP_ADD:
            eltwise(&R, EW_ADD, ref_addr(&R, o->dst), ref_stride(&R, o->dst), ref_addr(&R, o->src), ref_stride(&R, o->src),
                    (uint32_t)o->n, (uint32_t)op_rows(&R, o), 0, 0);
            break;
        case MUSE_OP_LOGITS:
            eltwise(&R, EW_LOGITS, ref_addr(&R, o->dst), (uint32_t)o->n, 0, 0, (uint32_t)o->n, (uint32_t)op_rows(&R, o),
                    o->scale, o->softcap);
            break;
        case MUSE_OP_OBSERVE: op_observe(&R, o); break;
        default:
            R.st = muse_error_set(err, MUSE_ERR_UNSUPPORTED, "vulkan: op %s has no Vulkan shader yet", op_name(o->kind));
        }
    }
    if (R.st) { /* nothing was submitted: end the recording unused */
        v->fn.vkEndCommandBuffer(v->cb);
        v->cb = one;
        return R.st;
    }
    muse_vk_end(v);
    const VkCommandBuffer cb = v->cb;
    v->cb = one;
    if (slot) slot->valid = true, v->records++;
    if ((st = muse_vk_submit_cb(v, cb, err))) return st;
    muse_vk_prof_collect(v);
    v->q_n = 0;
    return copy_out(&R);
}

/* The run's outputs from out to the caller. */
static muse_status copy_out(const struct rec *R) {
    const struct muse_program *p = R->p;
    const struct muse_prog_run *run = R->run;
    const uint8_t *out = R->v->out.map;
    if (run->n_out > 0 && run->logits)
        memcpy(run->logits, out + R->logits, (size_t)run->n_out * (size_t)p->bufs[MUSE_BUF_LOGITS].cols * 4);
    if (run->embd_out) memcpy(run->embd_out, out + R->embd, (size_t)run->n_rows * (size_t)p->bufs[MUSE_BUF_EMBD].cols * 4);
    if (run->features)
        memcpy(run->features, out + R->features, (size_t)run->n_rows * (size_t)run->n_features * (size_t)run->n_embd * 4);
    return MUSE_OK;
}
