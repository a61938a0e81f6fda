/*
 * test_media.c - prompts with images (src/gen/media.c), the mixed evaluation under them
 * (muse_eval_mixed, muse_session_eval_mixed) and the rows cache, on the vision goldens
 * (../shared/golden/vision: the 4-block projector, the 4-layer text model with <|image_start|> =
 * 995 and <|image_end|> = 996). Properties a wrong implementation breaks:
 *   - end to end: 997 84 305 277 995 [rows] 996 12 45 300 301 through muse_media_eval gives
 *     llama.cpp's logits (llm_logits.npy) within the README's 3e-2, for both encoder cases;
 *   - a mixed batch equals the split evaluation (muse_eval for text, muse_eval_embd for rows) bit
 *     for bit, and every n_batch (1, 3, 7, 64, 512: chunks that cut through the image, one batch)
 *     gives the same bits as every other;
 *   - text with markers: `<|image_start|>` + n_tokens ids + `<|image_end|>` in place of each marker,
 *     BOS once, the pieces tokenized as the whole text would be; marker/image count mismatch and a
 *     vocabulary without the image tokens are one clear error; taken pixels are freed on error
 *     (ASan build);
 *   - reuse: the same image in a follow-up prompt is reused by the session (nothing of it
 *     re-evaluated, no encode); a different image with the same size stops the prefix at its first
 *     row; continuation logits equal a cold evaluation bit for bit;
 *   - the cache: a hit does not encode, a bound of 0 drops unpinned rows, an LRU bound keeps the
 *     newest, a projector of another width is refused;
 *   - its progress hook (muse.h's shape: 0 goes on, nonzero cancels): every tower layer reported
 *     with the image's index; nonzero mid-way fails the rows with MUSE_ERR_CANCELLED and caches
 *     nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "gen/media.h"
#include "gen/session.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "vision/vision_test_util.h"

static struct muse_model *model;
static struct muse_vision *vision;
static struct muse_tokenizer *tok;
static int32_t n_vocab;

static struct muse_context *new_ctx(int n_batch) {
    struct muse_context_params cp = muse_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = (uint32_t)n_batch;
    cp.kv_type = MUSE_KV_TYPE_F32;
    cp.n_threads = 1;
    /* the exact kernels at every batch size: these tests compare chunkings bit for bit, and the
     * tile GEMM (32+ rows; the golden text model's F32 weights have one) sums in another order by
     * design (its bound: tests/model/test_tile_forward) */
    cp.no_repack = 1;
    struct muse_context *ctx = NULL;
    struct muse_error err;
    if (muse_context_create(model, cp, &ctx, &err)) fprintf(stderr, "context: %s\n", err.msg);
    return ctx;
}

static bool load_image(const char *name, struct muse_image *img) {
    char rel[128], path[512];
    struct muse_error err;
    snprintf(rel, sizeof rel, "images/%s", name);
    if (muse_image_load(vt_golden(rel, path, sizeof path), 0, img, &err)) {
        TEST_CONDF(0, "%s: %s", name, err.msg);
        return false;
    }
    return true;
}

/* The golden sequence 997 84 305 277 995 [img] 996 12 45 300 301 as a media prompt (borrowed image). */
static bool golden_prompt(struct muse_media_prompt *p, struct muse_image *img, int32_t cap) {
    static const int32_t head[] = {997, 84, 305, 277, 995}, tail[] = {996, 12, 45, 300, 301};
    struct muse_error err;
    memset(p, 0, sizeof *p);
    bool ok = !muse_media_prompt_add_tokens(p, head, 5, &err) &&
              !muse_media_prompt_add_image(p, vision, img, false, NULL, cap, &err) &&
              !muse_media_prompt_add_tokens(p, tail, 5, &err);
    TEST_CONDF(ok, "golden prompt: %s", err.msg);
    return ok;
}

/* Evaluate a whole prompt on a fresh context with n_batch; logits [n][n_vocab]. */
static float *eval_prompt(struct muse_media_cache *c, struct muse_media_prompt *p, int n_batch) {
    struct muse_context *ctx = new_ctx(n_batch);
    struct muse_session *s = NULL;
    struct muse_error err;
    float *lg = malloc(sizeof(float) * (size_t)p->n * (size_t)n_vocab);
    bool ok = ctx && lg && !muse_session_create(ctx, muse_session_default_params(), &s, &err) &&
              !muse_media_eval(s, c, p, 0, p->n, lg, 1, &err);
    TEST_CONDF(ok, "eval (n_batch %d): %s", n_batch, err.msg);
    muse_session_free(s);
    muse_context_free(ctx);
    if (!ok) free(lg);
    return ok ? lg : NULL;
}

static void test_end_to_end(struct muse_media_cache *c) {
    static const char *cases[] = {"enc_336x336_cap64", "enc_700x300_cap64"};
    static const char *images[] = {"img_336x336_gradient.png", "img_700x300_text.png"};
    for (int k = 0; k < 2; k++) {
        char rel[128], path[512];
        struct muse_image img;
        if (!load_image(images[k], &img)) continue;
        struct muse_media_prompt p;
        if (!golden_prompt(&p, &img, 64)) continue;
        int64_t lr = 0, lc = 0;
        snprintf(rel, sizeof rel, "encoder/%s.llm_logits.npy", cases[k]);
        float *glog = vt_read_npy(vt_golden(rel, path, sizeof path), &lr, &lc);
        TEST_CONDF(glog && lr == p.n && lc == n_vocab, "%s: golden logits %lld x %lld, prompt %d", cases[k],
                   (long long)lr, (long long)lc, p.n);
        float *one = eval_prompt(c, &p, 512);
        if (glog && one && lr == p.n) {
            double mx, rr;
            vt_diff(one, glog, (size_t)(lr * lc), &mx, &rr);
            TEST_CONDF(mx <= 3e-2, "%s: logits vs llama.cpp: max abs %.3g > 3e-2", cases[k], mx);
            printf("%s: %d positions (%d image rows), logits vs llama.cpp max abs %.3g\n", cases[k], p.n,
                   p.images[0].geom.n_tokens, mx);
        }
        /* chunked at every size == one batch, bit for bit */
        static const int batches[] = {1, 3, 7, 64};
        for (size_t b = 0; one && b < sizeof batches / sizeof batches[0]; b++) {
            float *lg = eval_prompt(c, &p, batches[b]);
            TEST_CONDF(lg && !memcmp(lg, one, sizeof(float) * (size_t)p.n * (size_t)n_vocab),
                       "%s: n_batch %d differs from one batch", cases[k], batches[b]);
            free(lg);
        }
        /* mixed == split (muse_eval + muse_eval_embd), bit for bit */
        struct muse_context *ctx = new_ctx(512);
        float *split = malloc(sizeof(float) * (size_t)p.n * (size_t)n_vocab);
        const struct muse_media_image *im = &p.images[0];
        struct muse_error err;
        bool ok = ctx && split && !muse_eval(ctx, p.ids, im->pos, split, 1, &err) &&
                  !muse_eval_embd(ctx, muse_media_prompt_image_rows(&p, 0), im->geom.n_tokens,
                                  split + (size_t)im->pos * n_vocab, 1, &err) &&
                  !muse_eval(ctx, p.ids + im->pos + im->geom.n_tokens, p.n - im->pos - im->geom.n_tokens,
                             split + (size_t)(im->pos + im->geom.n_tokens) * n_vocab, 1, &err);
        TEST_CONDF(ok, "split eval: %s", err.msg);
        TEST_CONDF(ok && one && !memcmp(split, one, sizeof(float) * (size_t)p.n * (size_t)n_vocab),
                   "%s: mixed batch differs from the split evaluation", cases[k]);
        free(split);
        muse_context_free(ctx);
        free(one);
        free(glog);
        muse_media_prompt_free(&p);
        muse_image_free(&img);
    }
}

static void test_text(void) {
    struct muse_error err;
    struct muse_image imgs[2];
    if (!load_image("img_336x336_gradient.png", &imgs[0]) || !load_image("img_96x64_small.png", &imgs[1])) return;
    static const char *const markers[] = {MUSE_MEDIA_MARKER_MTMD, MUSE_MEDIA_MARKER_PATCH};
    const char *text = "The first<__media__>and the second:<|patch|> end";
    struct muse_media_prompt p = {0};
    muse_status st = muse_media_prompt_add_text(&p, tok, vision, text, strlen(text), true, markers, 2, imgs, 2, false,
                                                64, &err);
    TEST_CONDF(st == MUSE_OK, "add_text: %s", err.msg);
    /* expected: tokens of each piece, 995, rows, 996 */
    int32_t *a = NULL, *b = NULL, *c = NULL;
    size_t na, nb, nc;
    muse_tokenizer_encode_alloc(tok, "The first", 9, MUSE_TOKENIZE_PARSE_SPECIAL | MUSE_TOKENIZE_ADD_BOS, &a, &na, &err);
    muse_tokenizer_encode_alloc(tok, "and the second:", 15, MUSE_TOKENIZE_PARSE_SPECIAL, &b, &nb, &err);
    muse_tokenizer_encode_alloc(tok, " end", 4, MUSE_TOKENIZE_PARSE_SPECIAL, &c, &nc, &err);
    const int32_t n0 = p.n_images == 2 ? p.images[0].geom.n_tokens : -1, n1 = p.n_images == 2 ? p.images[1].geom.n_tokens : -1;
    TEST_CONDF(p.n_images == 2 && n0 == 64 && n1 == muse_vision_n_tokens(vision, 96, 64, 64), "images %d, tokens %d / %d",
               p.n_images, n0, n1);
    TEST_CONDF(p.n == (int32_t)(na + nb + nc) + n0 + n1 + 4, "prompt of %d positions", p.n);
    if (st == MUSE_OK && p.n == (int32_t)(na + nb + nc) + n0 + n1 + 4) {
        int32_t i = 0;
        bool ok = !memcmp(p.ids, a, na * sizeof *a) && a[0] == 997;
        i += (int32_t)na;
        ok = ok && p.ids[i++] == 995 && p.images[0].pos == i;
        for (int32_t r = 0; r < n0; r++) ok = ok && p.ids[i + r] == muse_session_image_id(p.images[0].key, r) && p.ids[i + r] < 0;
        i += n0;
        ok = ok && p.ids[i++] == 996 && !memcmp(p.ids + i, b, nb * sizeof *b);
        i += (int32_t)nb;
        ok = ok && p.ids[i++] == 995 && p.images[1].pos == i && muse_media_prompt_image_at(&p, i + 3) == 1 &&
             muse_media_prompt_image_at(&p, i - 1) == -1;
        i += n1;
        ok = ok && p.ids[i++] == 996 && !memcmp(p.ids + i, c, nc * sizeof *c);
        TEST_COND("text with two markers: pieces, markers and row ids in place", ok);
    }
    free(a), free(b), free(c);
    muse_media_prompt_free(&p);

    /* count mismatch: one clear line; taken pixels are freed (ASan sees a leak otherwise) */
    struct muse_image copy;
    muse_image_resize(&imgs[1], imgs[1].width, imgs[1].height, &copy, &err);
    st = muse_media_prompt_add_text(&p, tok, vision, text, strlen(text), true, markers, 2, &copy, 1, true, 0, &err);
    TEST_CONDF(st == MUSE_ERR_INVALID_ARG && strstr(err.msg, "2 image markers") && strstr(err.msg, "but 1 image") &&
                   !copy.rgb,
               "mismatch: %d %s", st, err.msg);
    muse_media_prompt_free(&p);
    /* no images: markers stay text */
    st = muse_media_prompt_add_text(&p, tok, vision, "a<__media__>b", 13, false, markers, 1, NULL, 0, false, 0, &err);
    int32_t *d = NULL;
    size_t nd = 0;
    muse_tokenizer_encode_alloc(tok, "a<__media__>b", 13, MUSE_TOKENIZE_PARSE_SPECIAL, &d, &nd, &err);
    TEST_COND("no images: plain tokenization", st == MUSE_OK && p.n == (int32_t)nd && !memcmp(p.ids, d, nd * sizeof *d));
    free(d);
    muse_media_prompt_free(&p);

    /* a vocabulary without <|image_start|> */
    static const char *const toks[] = {"a", "b", "<|begin_of_text|>"};
    static const uint32_t lens[] = {1, 1, 17};
    const int32_t types[] = {1, 1, 3};
    struct muse_tokenizer_vocab v = {.tokens = toks, .token_lens = lens, .n_tokens = 3, .token_types = types,
                                     .bos_id = 2, .eos_id = -1, .eot_id = -1, .eom_id = -1};
    struct muse_tokenizer *small = NULL;
    if (muse_tokenizer_init(&v, &small, &err) == MUSE_OK) {
        struct muse_image c2;
        muse_image_resize(&imgs[1], imgs[1].width, imgs[1].height, &c2, &err);
        st = muse_media_prompt_add_text(&p, small, vision, "a<|patch|>", 10, false, markers + 1, 1, &c2, 1, true, 0, &err);
        TEST_CONDF(st == MUSE_ERR_MISSING && strstr(err.msg, "<|image_start|>") && !c2.rgb, "no image tokens: %d %s", st,
                   err.msg);
        muse_media_prompt_free(&p);
        muse_tokenizer_free(small);
    } else {
        TEST_CONDF(0, "small tokenizer: %s", err.msg);
    }
    muse_image_free(&imgs[0]);
    muse_image_free(&imgs[1]);
}

/* Session reuse across prompts with images, and the cache's counters. */
static void test_reuse(struct muse_media_cache *c) {
    struct muse_error err;
    struct muse_image a, b;
    if (!load_image("img_336x336_gradient.png", &a)) return;
    /* b: the same size, other pixels (a flipped copy) */
    muse_image_resize(&a, a.width, a.height, &b, &err);
    for (int32_t i = 0; i < b.width * b.height * 3; i++) b.rgb[i] = (uint8_t)(255 - b.rgb[i]);
    static const int32_t t1[] = {997, 84, 305, 995}, t2[] = {996, 12, 45}, t3[] = {300, 301, 302};
    struct muse_media_prompt p1 = {0}, p2 = {0}, p3 = {0};
    bool ok = !muse_media_prompt_add_tokens(&p1, t1, 4, &err) && !muse_media_prompt_add_image(&p1, vision, &a, false, NULL, 64, &err) &&
              !muse_media_prompt_add_tokens(&p1, t2, 3, &err);
    /* p2 = p1 + more text (a follow-up turn) */
    ok = ok && !muse_media_prompt_add_tokens(&p2, t1, 4, &err) && !muse_media_prompt_add_image(&p2, vision, &a, false, NULL, 64, &err) &&
         !muse_media_prompt_add_tokens(&p2, t2, 3, &err) && !muse_media_prompt_add_tokens(&p2, t3, 3, &err);
    /* p3: the other image */
    ok = ok && !muse_media_prompt_add_tokens(&p3, t1, 4, &err) && !muse_media_prompt_add_image(&p3, vision, &b, false, NULL, 64, &err) &&
         !muse_media_prompt_add_tokens(&p3, t2, 3, &err);
    TEST_CONDF(ok, "prompts: %s", err.msg);
    if (!ok) goto out;
    struct muse_context *ctx = new_ctx(16);
    struct muse_session *s = NULL;
    float *lg = malloc(sizeof(float) * (size_t)n_vocab * 256), *ref = NULL;
    muse_session_create(ctx, muse_session_default_params(), &s, &err);
    struct muse_media_cache_stats s0 = muse_media_cache_stats(c);
    ok = !muse_media_eval(s, c, &p1, 0, p1.n, lg, 0, &err);
    struct muse_media_cache_stats s1 = muse_media_cache_stats(c);
    TEST_CONDF(ok && s1.encodes + s1.hits == s0.encodes + s0.hits + 1, "p1: %s", err.msg);
    /* follow-up: everything but the last position of p1 (always re-evaluated) is reused */
    struct muse_session_keep k = muse_session_reuse(s, p2.ids, p2.n);
    TEST_CONDF(k.n_kept == p1.n, "follow-up keeps %d of %d", k.n_kept, p1.n);
    ok = !muse_media_eval(s, c, &p2, k.n_kept, p2.n - k.n_kept, lg, 1, &err);
    TEST_CONDF(ok, "p2 tail: %s", err.msg);
    TEST_COND("p2 needed no rows (the image was in the cache's KV)", !p2.images[0].rows);
    ref = eval_prompt(c, &p2, 512);
    TEST_COND("follow-up logits == cold evaluation",
              ref && ok && !memcmp(lg, ref + (size_t)k.n_kept * n_vocab, sizeof(float) * (size_t)(p2.n - k.n_kept) * n_vocab));
    free(ref);
    /* the other image: the prefix ends at its first row (the session may keep less: a sliding-window miss) */
    const int32_t lcp = muse_session_reuse_len(muse_session_tokens(s), muse_session_n_past(s), p3.ids, p3.n);
    TEST_CONDF(lcp == p3.images[0].pos, "other image: common prefix %d (its rows start at %d)", lcp, p3.images[0].pos);
    k = muse_session_reuse(s, p3.ids, p3.n);
    struct muse_media_cache_stats s2 = muse_media_cache_stats(c);
    ok = !muse_media_eval(s, c, &p3, k.n_kept, p3.n - k.n_kept, lg, 1, &err);
    struct muse_media_cache_stats s3 = muse_media_cache_stats(c);
    TEST_CONDF(ok && s3.encodes == s2.encodes + 1, "p3: %s (encodes %llu -> %llu)", err.msg,
               (unsigned long long)s2.encodes, (unsigned long long)s3.encodes);
    ref = eval_prompt(c, &p3, 512);
    TEST_COND("other image: logits == cold evaluation",
              ref && ok && !memcmp(lg, ref + (size_t)k.n_kept * n_vocab, sizeof(float) * (size_t)(p3.n - k.n_kept) * n_vocab));
    free(ref);
    /* a KV rebuilt from 0 with image a: rows come from the cache, no tower run */
    muse_session_clear(s);
    struct muse_media_prompt p4 = {0};
    muse_media_prompt_add_tokens(&p4, t1, 4, &err);
    muse_media_prompt_add_image(&p4, vision, &a, false, NULL, 64, &err);
    struct muse_media_cache_stats s4 = muse_media_cache_stats(c);
    ok = !muse_media_eval(s, c, &p4, 0, p4.n, lg, 0, &err);
    struct muse_media_cache_stats s5 = muse_media_cache_stats(c);
    TEST_CONDF(ok && s5.encodes == s4.encodes && s5.hits == s4.hits + 1, "rebuilt KV: %s, encodes %llu -> %llu", err.msg,
               (unsigned long long)s4.encodes, (unsigned long long)s5.encodes);
    /* eval must start at the session's position */
    TEST_COND("from != n_past refused", muse_media_eval(s, c, &p4, 0, 1, lg, 0, &err) == MUSE_ERR_INVALID_ARG);
    muse_media_prompt_free(&p4);
    free(lg);
    muse_session_free(s);
    muse_context_free(ctx);
out:
    muse_media_prompt_free(&p1);
    muse_media_prompt_free(&p2);
    muse_media_prompt_free(&p3);
    muse_image_free(&a);
    muse_image_free(&b);
}

static void test_cache_bounds(void) {
    struct muse_error err;
    struct muse_media_cache *c = NULL;
    TEST_COND("a projector of another width is refused",
              muse_media_cache_create(vision, 128, 0, &c, &err) == MUSE_ERR_SHAPE && strstr(err.msg, "do not belong"));
    struct muse_image img;
    if (!load_image("img_96x64_small.png", &img)) return;
    /* bound 0: rows live while pinned only */
    muse_media_cache_create(vision, 256, 0, &c, &err);
    for (int round = 0; round < 2; round++) {
        struct muse_media_prompt p = {0};
        muse_media_prompt_add_image(&p, vision, &img, false, NULL, 0, &err);
        TEST_CONDF(!muse_media_prompt_rows(c, &p, 0, p.n, &err), "rows: %s", err.msg);
        TEST_COND("pinned rows stay", muse_media_cache_stats(c).n_entries == 1);
        muse_media_prompt_free(&p);
        TEST_COND("bound 0: unpinned rows dropped", muse_media_cache_stats(c).n_entries == 0);
    }
    TEST_COND("bound 0: encoded twice", muse_media_cache_stats(c).encodes == 2 && muse_media_cache_stats(c).evictions == 2);
    muse_media_cache_free(c);
    /* a bound of about two images: the third evicts the least recently used */
    const size_t one = (size_t)6 * 256 * sizeof(float) + 256; /* 96x64 -> 3x2 = 6 tokens; entry overhead < 256 */
    muse_media_cache_create(vision, 256, 2 * one, &c, &err);
    struct muse_image v[3];
    for (int i = 0; i < 3; i++) {
        muse_image_resize(&img, img.width, img.height, &v[i], &err);
        v[i].rgb[0] = (uint8_t)(v[i].rgb[0] + 1 + i);
    }
    int order[] = {0, 1, 0, 2, 0, 1};
    uint64_t encodes[6];
    for (int j = 0; j < 6; j++) {
        struct muse_media_prompt p = {0};
        muse_media_prompt_add_image(&p, vision, &v[order[j]], false, NULL, 0, &err);
        muse_media_prompt_rows(c, &p, 0, p.n, &err);
        muse_media_prompt_free(&p);
        encodes[j] = muse_media_cache_stats(c).encodes;
    }
    /* 0 miss, 1 miss, 0 hit, 2 miss (evicts 1), 0 hit, 1 miss */
    TEST_CONDF(encodes[0] == 1 && encodes[1] == 2 && encodes[2] == 2 && encodes[3] == 3 && encodes[4] == 3 && encodes[5] == 4,
               "LRU: encodes %llu %llu %llu %llu %llu %llu", (unsigned long long)encodes[0], (unsigned long long)encodes[1],
               (unsigned long long)encodes[2], (unsigned long long)encodes[3], (unsigned long long)encodes[4],
               (unsigned long long)encodes[5]);
    TEST_COND("LRU: two entries kept", muse_media_cache_stats(c).n_entries == 2);
    for (int i = 0; i < 3; i++) muse_image_free(&v[i]);
    muse_media_cache_free(c);
    muse_image_free(&img);
}

struct progress_log {
    int calls, stop_at;
    int32_t image;
    uint64_t done, total;
};

static int on_encode(void *user, int32_t image, uint64_t done, uint64_t total) {
    struct progress_log *l = user;
    l->calls++;
    l->image = image, l->done = done, l->total = total;
    return l->stop_at > 0 && (int)done >= l->stop_at;
}

static void test_progress(void) {
    struct muse_error err;
    struct muse_media_cache *c = NULL;
    struct muse_image img;
    if (!load_image("img_96x64_small.png", &img)) return;
    muse_media_cache_create(vision, 256, MUSE_MEDIA_CACHE_DEFAULT_BYTES, &c, &err);
    struct progress_log l = {.stop_at = 2};
    muse_media_cache_set_progress(c, on_encode, &l);
    struct muse_media_prompt p = {0};
    muse_media_prompt_add_image(&p, vision, &img, false, NULL, 0, &err);
    muse_status st = muse_media_prompt_rows(c, &p, 0, p.n, &err);
    TEST_CONDF(st == MUSE_ERR_CANCELLED && l.calls == 2 && l.done == 2 && l.image == 0, "cancelled encode: status %d (%s), "
               "%d calls, done %llu", st, err.msg, l.calls, (unsigned long long)l.done);
    TEST_COND("a cancelled encode caches nothing", muse_media_cache_stats(c).n_entries == 0);
    muse_media_prompt_free(&p);
    l = (struct progress_log){0};
    muse_media_prompt_add_image(&p, vision, &img, false, NULL, 0, &err);
    st = muse_media_prompt_rows(c, &p, 0, p.n, &err);
    TEST_CONDF(st == MUSE_OK && l.calls == (int)l.total && l.done == l.total && l.total >= 2,
               "encode with progress: status %d, %d calls of %llu layers", st, l.calls, (unsigned long long)l.total);
    muse_media_prompt_free(&p);
    muse_media_cache_free(c);
    muse_image_free(&img);
}

static void test_ids(void) {
    uint8_t key[32];
    for (int i = 0; i < 32; i++) key[i] = (uint8_t)(i * 37 + 11);
    bool neg = true, cyc = true;
    for (int32_t r = 0; r < 64; r++) {
        neg = neg && muse_session_image_id(key, r) < 0;
        cyc = cyc && muse_session_image_id(key, r) == muse_session_image_id(key, r + 8);
    }
    memset(key, 0xff, sizeof key);
    TEST_COND("image ids: negative, cycling through 8 words, extremes in range",
              neg && cyc && muse_session_image_id(key, 0) == INT32_MIN);
    memset(key, 0, sizeof key);
    TEST_COND("image id of a zero word is -1", muse_session_image_id(key, 3) == -1);
    /* the session refuses a row with a non-negative id and an image id without a row */
    struct muse_context *ctx = new_ctx(8);
    struct muse_session *s = NULL;
    struct muse_error err;
    muse_session_create(ctx, muse_session_default_params(), &s, &err);
    float row[256] = {0};
    const float *rows[2] = {row, NULL};
    int32_t ids[2] = {5, 6};
    TEST_COND("row with a token id refused", muse_session_eval_mixed(s, ids, rows, 2, NULL, 0, &err) == MUSE_ERR_INVALID_ARG);
    ids[0] = -5, ids[1] = -6;
    TEST_COND("image id without a row refused", muse_session_eval_mixed(s, ids, rows, 2, NULL, 0, &err) == MUSE_ERR_INVALID_ARG);
    ids[1] = 6;
    TEST_COND("a valid mixed pair", muse_session_eval_mixed(s, ids, rows, 2, NULL, 0, &err) == MUSE_OK &&
                                        muse_session_n_past(s) == 2 && muse_session_tokens(s)[0] == -5);
    muse_session_free(s);
    muse_context_free(ctx);
}

int main(void) {
    char path[512];
    struct muse_error err;
    if (muse_model_load(vt_golden("models/vis-text-4l-256.gguf", path, sizeof path), muse_model_default_params(), &model,
                        &err)) {
        fprintf(stderr, "model: %s\n", err.msg);
        return 1;
    }
    n_vocab = muse_model_n_vocab(model);
    struct muse_gguf *g = NULL;
    if (muse_gguf_open(path, &g, &err) || muse_tokenizer_init_from_gguf(g, &tok, &err)) {
        fprintf(stderr, "tokenizer: %s\n", err.msg);
        return 1;
    }
    muse_gguf_free(g);
    struct muse_vision_params vp = muse_vision_default_params();
    vp.n_threads = 2;
    if (muse_vision_load(vt_golden("models/vis-mmproj.gguf", path, sizeof path), vp, &vision, &err)) {
        fprintf(stderr, "mmproj: %s\n", err.msg);
        return 1;
    }
    struct muse_media_cache *c = NULL;
    if (muse_media_cache_create(vision, muse_model_n_embd(model), MUSE_MEDIA_CACHE_DEFAULT_BYTES, &c, &err)) {
        fprintf(stderr, "cache: %s\n", err.msg);
        return 1;
    }
    test_ids();
    test_end_to_end(c);
    test_text();
    test_reuse(c);
    test_cache_bounds();
    test_progress();
    muse_media_cache_free(c);
    muse_vision_free(vision);
    muse_tokenizer_free(tok);
    muse_model_free(model);
    return TEST_REPORT();
}
