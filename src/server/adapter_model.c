/*
 * adapter_model.c - the server's adapter (adapter.h) over libmuse: the model + one muse_context
 * holding a sequence per slot, run by a stepper that batches the slots' evaluations into one forward
 * per step (muse.h continuous batching; with -nocb or a single slot: a context per slot), the GGUF tokenizer (text/tokenizer.h), the chat template of the file or the
 * built-in one (text/chat.h), one sampler per request (gen/sampler.h), and one session per slot
 * (gen/session.h) that keeps the slot's KV state: prefix reuse, rollback, and the checkpoint of
 * the sliding-window rings taken where each prompt ends (slot_begin). The session decides what a
 * rewind the rings cannot serve costs, exactly as in `muse chat`; this file only adapts.
 *
 * Generation goes through the generation loop (src/gen/generate.h), one per slot, over its
 * session: plain decoding without a drafter; with --draft-model each slot's loop has speculative
 * decoding plugged in (src/speculative/spec.h), drafting with its own ring (which follows the
 * session's prefix reuse, rollbacks and checkpoints). The scheduler still sees
 * one token per slot_sample and one slot_eval per token: a verify step queues its accepted tokens
 * (already in the cache, so their slot_eval is free) and slot_sample hands them out one by one, so
 * streaming, stop strings, the output parser, max tokens and cancellation work per token as before.
 * Tokens a stop cut off stay in the cache beyond the scheduler's mirror; the next request's
 * slot_keep drops them.
 *
 * A paged KV pool (info.kv_pool): slot_reserve takes a prompt's cells before it is evaluated, and a
 * slot that finds the pool full evicts an idle slot's cache (evict_for) before it gives up. Each
 * slot's `busy` (under its mu) tells an evicting slot whether it may clear it.
 */
#include <cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h"
#include "gen/media.h"
#include "gen/constrain.h"
#include "gen/generate.h"
#include "gen/sampler.h"
#include "gen/session.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/adapter.h"
#include "text/chat.h"
#include "text/tokenizer.h"

struct model_adapter {
    struct muse_model *model;
    struct muse_tokenizer *tok;
    struct muse_chat *chat;   /* template + scratch conversation; guarded by chat_mu */
    pthread_mutex_t chat_mu;
    char bos_text[64], eos_text[64];
    struct muse_srv_adapter_info info;
    struct muse_vision *vision;    /* the projector, or NULL (no images) */
    struct muse_media_cache *media; /* projected rows by content, shared by the slots (its own locks) */
    int image_max_tokens;
    struct muse_context_params cp; /* of every slot (n_ctx resolved) */
    char *template_text;           /* owned copy of the template source (info.chat_template) */
    struct muse_drafter *drafter;  /* --draft-model, shared read-only by the slots; or NULL */
    struct muse_spec_params spec;
    struct muse_grammar_vocab *gvocab; /* the token trie, built by the first grammar request */
    pthread_mutex_t gvocab_mu;
    struct muse_context *embd_ctx;     /* embeddings: made by the first request (n_ctx of a slot); embd_mu */
    /* continuous batching (several slots, unless -nocb): one context holding a sequence per slot
     * (its KV paged from a pool when info.kv_pool) and the stepper that runs the slots' evaluations
     * as one forward per step (muse.h, continuous batching); made by the first slot_create. NULL: each slot has a
     * context of its own */
    bool batched;
    int n_slots, next_seq, prefill_step;
    struct muse_context *shared;
    struct muse_stepper *stepper;
    struct model_slot **slots;     /* [n_slots] batched: each sequence's slot (what a full KV pool evicts from) */
    enum muse_pooling pooling;
    pthread_mutex_t embd_mu;
};

struct model_slot {
    struct model_adapter *r;
    struct muse_context *ctx;     /* its own, or NULL: sequence seq of r->shared */
    int32_t seq;
    struct muse_session *kv;      /* the context's KV state (tokens, reuse, checkpoints) */
    struct muse_gen *gen;         /* the generation loop over kv */
    struct muse_spec *spec;       /* speculative decoding plugged into it (with a drafter), or NULL */
    bool has_logits;              /* a prompt eval or a step left something to sample */
    bool generating;              /* between slot_begin and the next slot_keep: slot_eval(1) commits a sample */
    struct muse_sampler *sampler; /* of the current request (slot_begin) */
    struct muse_spec_stats counted; /* the stats already reported by slot_spec_counts */
    bool media_turn;              /* image rows were evaluated for the coming request */
    struct muse_constraint *cons; /* its grammar, if any (slot_constrain) */
    pthread_mutex_t mu;           /* guards busy; held while another slot's eviction clears this one */
    bool busy;                    /* between slot_keep and slot_done: a request runs here */
};

static void model_info(void *self, struct muse_srv_adapter_info *out) { *out = ((struct model_adapter *)self)->info; }

static muse_status model_tokenize(void *self, const char *text, size_t len, bool add_special, bool parse_special,
                                  int32_t **toks, int *n_toks, struct muse_error *err) {
    struct model_adapter *r = self;
    size_t n = 0;
    unsigned flags = (add_special ? MUSE_TOKENIZE_ADD_BOS : 0) | (parse_special ? MUSE_TOKENIZE_PARSE_SPECIAL : 0);
    muse_status st = muse_tokenizer_encode_alloc(r->tok, text, len, flags, toks, &n, err);
    if (st != MUSE_OK) return st;
    if (n > (size_t)1 << 30) {
        free(*toks);
        *toks = NULL;
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "text too long");
    }
    *n_toks = (int)n;
    return MUSE_OK;
}

static int model_piece(void *self, int32_t tok, char *buf, int cap) {
    struct model_adapter *r = self;
    size_t len = 0;
    const char *b = muse_tokenizer_token_bytes(r->tok, tok, &len);
    if (!b) return -1;
    if (len > (size_t)1 << 20) len = (size_t)1 << 20;
    memcpy(buf, b, len < (size_t)cap ? len : (size_t)cap);
    return (int)len;
}

static bool model_is_eog(void *self, int32_t tok) { return muse_tokenizer_is_eog(((struct model_adapter *)self)->tok, tok); }

/*
 * An OpenAI message as the chat template wants it: tool-call arguments as objects (clients send
 * JSON strings), "developer" as "system", null content as "".
 */
static cJSON *template_message(const cJSON *m, struct muse_error *err) {
    cJSON *c = cJSON_Duplicate(m, true);
    if (!c) return NULL;
    cJSON *role = cJSON_GetObjectItemCaseSensitive(c, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "developer"))
        cJSON_ReplaceItemInObjectCaseSensitive(c, "role", cJSON_CreateString("system"));
    cJSON *content = cJSON_GetObjectItemCaseSensitive(c, "content");
    if (!content || cJSON_IsNull(content)) cJSON_ReplaceItemInObjectCaseSensitive(c, "content", cJSON_CreateString(""));
    if (!cJSON_GetObjectItemCaseSensitive(c, "content")) cJSON_AddStringToObject(c, "content", "");
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(c, "tool_calls"), *call;
    cJSON_ArrayForEach(call, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (!cJSON_IsObject(obj)) {
            cJSON_Delete(obj);
            cJSON_Delete(c);
            muse_error_set(err, MUSE_ERR_INVALID_ARG, "tool_calls arguments must be a JSON object");
            return NULL;
        }
        cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
    }
    return c;
}

static muse_status model_render(void *self, const struct muse_srv_chat_input *in, char **prompt, struct muse_error *err) {
    struct model_adapter *r = self;
    muse_status st = MUSE_OK;
    pthread_mutex_lock(&r->chat_mu);
    muse_chat_reset(r->chat);
    const cJSON *m;
    cJSON_ArrayForEach(m, in->messages) {
        cJSON *c = template_message(m, err);
        if (!c) {
            st = err && err->status ? err->status : MUSE_ERR_NOMEM;
            goto out;
        }
        st = muse_chat_add_json(r->chat, c, err);
        cJSON_Delete(c);
        if (st != MUSE_OK) goto out;
    }
    struct muse_chat_options opts = {0};
    /* exactly what `muse chat` renders: the vocab's BOS/EOS texts ("" when it has none; the
     * template writes bos_token itself, so the prompt is tokenized without adding a second one) */
    opts.reasoning = in->reasoning_strength;
    opts.tools = in->tools;
    opts.extra = in->template_kwargs;
    opts.bos_token = r->bos_text;
    opts.eos_token = r->eos_text;
    size_t len = 0;
    st = muse_chat_render(r->chat, &opts, true, prompt, &len, err);
out:
    muse_chat_reset(r->chat);
    pthread_mutex_unlock(&r->chat_mu);
    return st;
}

static void model_slot_free(void *slot) {
    struct model_slot *s = slot;
    if (!s) return;
    muse_spec_free(s->spec);
    muse_gen_free(s->gen);
    muse_session_free(s->kv);
    muse_context_free(s->ctx);
    muse_sampler_free(s->sampler);
    muse_constraint_free(s->cons);
    if (s->r && s->r->slots && s->r->slots[s->seq] == s) s->r->slots[s->seq] = NULL;
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void *model_slot_create(void *self, struct muse_error *err) {
    struct model_adapter *r = self;
    struct muse_context_params cp = r->cp;
    struct muse_session_params sp = muse_session_default_params();
    struct model_slot *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->r = r;
    pthread_mutex_init(&s->mu, NULL);
    if (r->batched) {
        if (!r->slots && !(r->slots = calloc((size_t)r->n_slots, sizeof *r->slots))) goto nomem;
        if (!r->shared) {
            cp.n_seq_max = (uint32_t)r->n_slots;
            cp.n_ctx_pool = (uint32_t)r->info.kv_pool;
            if (muse_context_create(r->model, cp, &r->shared, err) != MUSE_OK) goto fail;
            struct muse_stepper_params stp = muse_stepper_default_params();
            if (r->prefill_step > 0) stp.n_prefill_rows = r->prefill_step;
            if (muse_stepper_create(r->shared, stp, &r->stepper, err) != MUSE_OK) goto fail;
        }
        if (r->next_seq >= r->n_slots) {
            muse_error_set(err, MUSE_ERR_INVALID_ARG, "more slots than the %d the adapter was made for", r->n_slots);
            goto fail;
        }
        s->seq = sp.seq = r->next_seq++;
        sp.stepper = r->stepper;
        if (muse_session_create(r->shared, sp, &s->kv, err) != MUSE_OK) goto fail;
        r->slots[s->seq] = s;
    } else {
        if (muse_context_create(r->model, cp, &s->ctx, err) != MUSE_OK) goto fail;
        if (muse_session_create(s->ctx, sp, &s->kv, err) != MUSE_OK) goto fail;
    }
    if (muse_gen_create(s->kv, &s->gen, err) != MUSE_OK) goto fail;
    if (r->drafter && muse_spec_create(s->gen, r->drafter, r->spec, &s->spec, err) != MUSE_OK) goto fail;
    return s;
nomem:
    muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
fail:
    model_slot_free(s);
    return NULL;
}

static struct muse_session_keep model_slot_keep(void *slot, int n_keep) {
    struct model_slot *s = slot;
    pthread_mutex_lock(&s->mu);
    s->busy = true;
    pthread_mutex_unlock(&s->mu);
    if (s->r->stepper) muse_stepper_join(s->r->stepper, s->seq); /* a request starts: steps wait for this slot */
    struct muse_session_keep k = muse_gen_keep(s->gen, n_keep);
    s->has_logits = false;
    s->generating = false;
    return k;
}

/* The request is over: steps no longer wait for this slot. */
static void model_slot_done(void *slot) {
    struct model_slot *s = slot;
    if (s->r->stepper) muse_stepper_leave(s->r->stepper, s->seq);
    pthread_mutex_lock(&s->mu);
    s->busy = false;
    pthread_mutex_unlock(&s->mu);
}

/*
 * A paged KV pool that cannot hold n more positions of slot s: forget the cache of an idle slot
 * (its prompt cache: the next request there re-evaluates its prompt) so that its cells go back.
 * True when one was evicted (try again), false when no idle slot holds anything (the caller's
 * error stands: the running requests hold the pool).
 */
static bool evict_for(struct model_slot *s, int n, muse_status st) {
    struct model_adapter *r = s->r;
    if (st != MUSE_ERR_CONTEXT || !r->info.kv_pool || !r->slots || muse_session_n_past(s->kv) + n > r->info.n_ctx)
        return false; /* not the pool: the slot's own context is full */
    for (int i = 0; i < r->n_slots; i++) {
        struct model_slot *o = r->slots[i];
        if (!o || o == s) continue;
        pthread_mutex_lock(&o->mu);
        const bool evict = !o->busy && muse_session_n_past(o->kv) > 0;
        if (evict) muse_gen_clear(o->gen);
        pthread_mutex_unlock(&o->mu);
        if (evict) return true;
    }
    return false;
}

static muse_status model_slot_reserve(void *slot, int n_pos, struct muse_error *err) {
    struct model_slot *s = slot;
    if (!s->r->info.kv_pool) return MUSE_OK;
    muse_status st;
    do st = muse_seq_reserve(s->r->shared, s->seq, n_pos, err);
    while (evict_for(s, n_pos - muse_session_n_past(s->kv), st));
    return st;
}

static muse_status model_slot_eval(void *slot, const int32_t *toks, int n, struct muse_error *err) {
    struct model_slot *s = slot;
    s->has_logits = false;
    muse_status st;
    do /* generating: the token just sampled (an accepted draft costs nothing; the anchor is a step) */
        st = s->generating && n == 1 ? muse_gen_advance(s->gen, toks[0], INT64_MAX, err) : muse_gen_eval(s->gen, toks, n, err);
    while (evict_for(s, n, st));
    if (st == MUSE_OK) s->has_logits = true;
    return st;
}

static muse_status model_media_prompt(void *self, const char *text, size_t len, struct muse_image *images,
                                      int n_images, void **media, int32_t **toks, int *n_toks, struct muse_error *err) {
    static const char *const markers[] = {MUSE_MEDIA_MARKER_MTMD};
    struct model_adapter *r = self;
    *media = NULL;
    *toks = NULL;
    struct muse_media_prompt *p = calloc(1, sizeof *p);
    if (!p) {
        for (int k = 0; k < n_images; k++) muse_image_free(&images[k]);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    /* the template writes BOS itself (model_render), so none is added here */
    muse_status st = muse_media_prompt_add_text(p, r->tok, r->vision, text, len, false, markers, 1, images, n_images,
                                                true, r->image_max_tokens, err);
    if (st == MUSE_OK && !(*toks = malloc(sizeof **toks * (size_t)(p->n ? p->n : 1))))
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (st != MUSE_OK) {
        muse_media_prompt_free(p);
        free(p);
        return st;
    }
    memcpy(*toks, p->ids, sizeof **toks * (size_t)p->n);
    *n_toks = p->n;
    *media = p;
    return MUSE_OK;
}

static void model_media_free(void *self, void *media) {
    (void)self;
    muse_media_prompt_free(media);
    free(media);
}

struct media_range {
    struct model_slot *s;
    void *media;
    int from, n;
};

static muse_status media_range_eval(void *user, float *logits, struct muse_error *err) {
    const struct media_range *m = user;
    return muse_media_eval(m->s->kv, m->s->r->media, m->media, m->from, m->n, logits, 0, err);
}

static muse_status model_slot_eval_media(void *slot, void *media, int from, int n, struct muse_error *err) {
    struct model_slot *s = slot;
    s->has_logits = false;
    s->media_turn = true; /* no drafting in this request (slot_begin): the ring restarts after the rows */
    struct media_range m = {s, media, from, n};
    muse_status st;
    do st = muse_gen_eval_rows(s->gen, media_range_eval, &m, err);
    while (evict_for(s, n, st));
    if (st == MUSE_OK) s->has_logits = true;
    return st;
}

static void model_media_stats(void *self, uint64_t *encodes, uint64_t *hits, uint64_t *tokens, double *seconds) {
    struct model_adapter *r = self;
    const struct muse_media_cache_stats st = muse_media_cache_stats(r->media);
    *encodes = st.encodes;
    *hits = st.hits;
    *tokens = st.tokens_encoded;
    *seconds = st.encode_s;
}

static muse_status model_slot_begin(void *slot, const struct muse_sampler_params *sp, struct muse_error *err) {
    struct model_slot *s = slot;
    muse_sampler_free(s->sampler);
    s->sampler = NULL;
    muse_constraint_free(s->cons);
    s->cons = NULL;
    /* the prompt ends here: the next request most likely diverges here (session.h) */
    muse_status st = muse_gen_checkpoint(s->gen, err);
    if (st != MUSE_OK) return st;
    if ((st = muse_sampler_create(*sp, s->r->info.n_vocab, &s->sampler, err)) != MUSE_OK) return st;
    muse_gen_begin(s->gen, s->sampler);
    if (s->spec) muse_spec_set_drafting(s->spec, !s->media_turn); /* turns with images are decoded plainly */
    s->media_turn = false;
    s->generating = true;
    return MUSE_OK;
}

/* probs[0..n) = the n most likely tokens of softmax(logits), descending (ties: lower id), and
 * probs[n] = the token `sampled` with its probability. */
static void top_probs(const float *logits, int n_vocab, int n, int32_t sampled, struct muse_srv_prob *probs) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    int k = 0; /* insertion into a sorted list of at most n entries: n is small (<= 100) */
    for (int i = 0; i < n_vocab; i++) {
        if (k == n && !(logits[i] > logits[probs[k - 1].token])) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && logits[probs[j - 1].token] < logits[i]) {
            probs[j] = probs[j - 1];
            j--;
        }
        probs[j].token = i;
    }
    for (int i = 0; i < k; i++) probs[i].prob = (float)(exp((double)logits[probs[i].token] - mx) / sum);
    probs[n].token = sampled; /* its own probability, also when it is outside the top n */
    probs[n].prob = (float)(exp((double)logits[sampled] - mx) / sum);
}

static muse_status model_slot_sample(void *slot, int n_probs, struct muse_srv_prob *probs, int32_t *tok,
                                     struct muse_error *err) {
    struct model_slot *s = slot;
    if (!s->has_logits || !s->sampler) return muse_error_set(err, MUSE_ERR_INTERNAL, "sample before eval and begin");
    /* the loop samples and accepts (penalties look at what this request generated) */
    const int n_vocab = s->r->info.n_vocab;
    const float *row = NULL;
    muse_status st = muse_gen_sample(s->gen, tok, &row, err);
    if (st != MUSE_OK) return st;
    if (n_probs > 0) {
        int n = n_probs < n_vocab ? n_probs : n_vocab; /* the server clamps; the sampled one stays at [n_probs] */
        top_probs(row, n_vocab, n, *tok, probs);
        if (n < n_probs) probs[n_probs] = probs[n];
    }
    s->has_logits = false;
    return MUSE_OK;
}

static void model_slot_spec_counts(void *slot, uint64_t *drafted, uint64_t *accepted, uint64_t *steps) {
    struct model_slot *s = slot;
    const struct muse_spec_stats now = s->spec ? muse_spec_stats(s->spec) : (struct muse_spec_stats){0};
    *drafted = now.n_drafted - s->counted.n_drafted;
    *accepted = now.n_accepted - s->counted.n_accepted;
    *steps = now.n_steps_spec - s->counted.n_steps_spec;
    s->counted = now;
}

static void model_batch_stats(void *self, uint64_t *steps, uint64_t *rows, uint64_t *shared, uint64_t *splits,
                              uint64_t *preempted) {
    struct model_adapter *r = self;
    const struct muse_stepper_stats st = r->stepper ? muse_stepper_stats(r->stepper) : (struct muse_stepper_stats){0};
    *steps = st.n_steps, *rows = st.n_rows, *shared = st.n_multi, *splits = st.n_split, *preempted = st.n_preempted;
}

static void model_kv_cells(void *self, int64_t *used, int64_t *total) {
    struct model_adapter *r = self;
    if (r->shared && r->info.kv_pool) {
        muse_context_kv_cells(r->shared, used, total); /* the pool's counter is atomic */
    } else {
        *used = -1; /* unknown here without reading the slots' caches under a step: not told */
        *total = (int64_t)r->info.n_ctx * r->n_slots;
    }
}

static muse_status model_grammar_compile(void *self, enum muse_grammar_syntax syntax, const char *text, size_t len,
                                         struct muse_grammar **out, struct muse_error *err) {
    struct model_adapter *r = self;
    return muse_grammar_compile(syntax, text, len, r->tok, out, err);
}

static muse_status model_slot_constrain(void *slot, const struct muse_grammar *g, const char *const *triggers,
                                        const char *seed, struct muse_error *err) {
    struct model_slot *s = slot;
    struct model_adapter *r = s->r;
    muse_gen_constrain(s->gen, NULL); /* the loop samples through the constraint (no drafting) */
    muse_constraint_free(s->cons);
    s->cons = NULL;
    if (!g) return MUSE_OK;
    muse_status st = MUSE_OK;
    pthread_mutex_lock(&r->gvocab_mu); /* the trie is built once (~0.1 s on 202K tokens), then read-only */
    if (!r->gvocab) st = muse_grammar_vocab_from_tokenizer(r->tok, &r->gvocab, err);
    pthread_mutex_unlock(&r->gvocab_mu);
    if (st != MUSE_OK) return st;
    st = muse_constraint_create(g, r->gvocab, r->tok, triggers, seed, &s->cons, err);
    if (st == MUSE_OK) muse_gen_constrain(s->gen, s->cons);
    return st;
}

static muse_status model_embed(void *self, const int32_t *const *toks, const int32_t *n, int n_inputs, int normalize,
                               float *out, struct muse_error *err) {
    struct model_adapter *r = self;
    pthread_mutex_lock(&r->embd_mu);
    muse_status st = MUSE_OK;
    if (!r->embd_ctx) {
        struct muse_context_params cp = r->cp;
        cp.embeddings = 1;
        cp.n_seq_max = 4; /* inputs of one request embedded together (muse_embed_batch) */
        cp.trace = NULL;
        cp.capture = NULL;
        st = muse_context_create(r->model, cp, &r->embd_ctx, err);
    }
    if (st == MUSE_OK && r->pooling == MUSE_POOLING_NONE)
        st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                            "the server pools embeddings with 'none' (a vector per token), which the embeddings APIs "
                            "cannot return: start it with --pooling mean, cls or last");
    else if (st == MUSE_OK) st = muse_embed_batch(r->embd_ctx, toks, n, n_inputs, r->pooling, normalize, out, err);
    pthread_mutex_unlock(&r->embd_mu);
    return st;
}

static void model_destroy(void *self) {
    struct model_adapter *r = self;
    if (!r) return;
    muse_context_free(r->embd_ctx);
    muse_stepper_free(r->stepper);
    muse_context_free(r->shared);
    free(r->slots);
    pthread_mutex_destroy(&r->embd_mu);
    muse_media_cache_free(r->media);
    muse_vision_free(r->vision);
    muse_chat_free(r->chat);
    muse_tokenizer_free(r->tok);
    muse_drafter_free(r->drafter);
    muse_model_free(r->model);
    free(r->template_text);
    muse_grammar_vocab_free(r->gvocab);
    pthread_mutex_destroy(&r->gvocab_mu);
    pthread_mutex_destroy(&r->chat_mu);
    free(r);
}

static const struct muse_srv_adapter_ops model_ops = {
    .destroy = model_destroy,
    .info = model_info,
    .tokenize = model_tokenize,
    .token_piece = model_piece,
    .is_eog = model_is_eog,
    .render_chat = model_render,
    .slot_create = model_slot_create,
    .slot_free = model_slot_free,
    .slot_done = model_slot_done,
    .slot_keep = model_slot_keep,
    .slot_eval = model_slot_eval,
    .slot_reserve = model_slot_reserve,
    .slot_begin = model_slot_begin,
    .slot_sample = model_slot_sample,
    .media_prompt = model_media_prompt,
    .media_free = model_media_free,
    .slot_eval_media = model_slot_eval_media,
    .media_stats = model_media_stats,
    .slot_spec_counts = model_slot_spec_counts,
    .batch_stats = model_batch_stats,
    .kv_cells = model_kv_cells,
    .grammar_compile = model_grammar_compile,
    .slot_constrain = model_slot_constrain,
    .embed = model_embed,
};

/* Text of token id (for the template's bos_token/eos_token), "" when absent. */
static void token_text(const struct muse_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    const char *t = id >= 0 ? muse_tokenizer_token_text(tok, id, &len) : NULL;
    if (!t || len >= cap) len = 0;
    if (t) memcpy(buf, t, len);
    buf[len] = 0;
}

muse_status muse_srv_model_adapter_create(const char *model_path, const struct muse_srv_model_params *params,
                                          struct muse_srv_adapter *out, struct muse_error *err) {
    const struct muse_srv_model_params none = {.pooling = -1};
    if (!params) params = &none;
    struct model_adapter *r = calloc(1, sizeof *r);
    if (!r) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->chat_mu, NULL);
    pthread_mutex_init(&r->gvocab_mu, NULL);
    pthread_mutex_init(&r->embd_mu, NULL);
    r->cp = params->cparams ? *params->cparams : muse_context_default_params();
    if (params->n_batch > 0) r->cp.n_batch = (uint32_t)params->n_batch;
    r->spec = params->spec; /* used with draft_path only */
    r->n_slots = params->n_slots > 1 ? params->n_slots : 1;
    r->batched = r->n_slots > 1 && !params->no_batching;
    r->info.batched = r->batched;
    r->prefill_step = params->prefill_step;
    struct muse_model_params mp = params->mparams ? *params->mparams : muse_model_default_params();
    muse_status st = muse_model_load(model_path, mp, &r->model, err);
    if (st != MUSE_OK) goto fail;
    if (params->draft_path &&
        (st = muse_drafter_load(params->draft_path, r->model, muse_drafter_default_params(), &r->drafter, err)) != MUSE_OK)
        goto fail;
    const struct muse_gguf *g = r->model->gguf;
    if ((st = muse_tokenizer_init_from_gguf(g, &r->tok, err)) != MUSE_OK) goto fail;
    const struct muse_gguf_kv *tmpl = muse_gguf_find_kv(g, "tokenizer.chat_template");
    bool has_tmpl = tmpl && tmpl->value.type == MUSE_GGUF_TYPE_STRING;
    const char *src = params->chat_template ? params->chat_template : has_tmpl ? tmpl->value.v.str.data : NULL;
    size_t src_len = params->chat_template ? params->chat_template_len : has_tmpl ? (size_t)tmpl->value.v.str.len : 0;
    st = muse_chat_create(src, src_len, &r->chat, err);
    if (st != MUSE_OK) {
        muse_error_prefix(err, "chat template of %s: ",
                          params->chat_template ? (params->chat_template_path ? params->chat_template_path : "--chat-template-file")
                                                : model_path);
        goto fail;
    }
    if (!(r->template_text = malloc(src_len + 1))) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (src_len) memcpy(r->template_text, src, src_len);
    r->template_text[src_len] = 0;
    r->info.chat_template = r->template_text;
    token_text(r->tok, muse_tokenizer_bos(r->tok), r->bos_text, sizeof r->bos_text);
    token_text(r->tok, muse_tokenizer_eos(r->tok), r->eos_text, sizeof r->eos_text);
    r->info.n_vocab = muse_tokenizer_n_vocab(r->tok);
    if (r->info.n_vocab != muse_model_n_vocab(r->model)) {
        st = muse_error_set(err, MUSE_ERR_FORMAT, "%s: tokenizer has %d tokens, the model %d", model_path,
                            r->info.n_vocab, muse_model_n_vocab(r->model));
        goto fail;
    }
    r->info.n_ctx_train = muse_model_n_ctx_train(r->model);
    struct muse_context_params auto_cp = r->cp;
    auto_cp.n_ctx = 0;
    if (params->n_ctx > 0) {
        r->info.n_ctx = params->n_ctx;
    } else {
        r->info.n_ctx = (int)muse_context_auto_n_ctx(r->model, auto_cp, r->n_slots);
        if (r->batched && r->n_slots > 1 && !params->kv_pool) {
            /* batched: a slot may grow to what it could have alone, while the slots together stay
             * within the memory available (a paged KV pool), when that is more */
            const int alone = (int)muse_context_auto_n_ctx(r->model, auto_cp, 1);
            if (alone > r->info.n_ctx) {
                r->info.kv_pool = (int64_t)r->info.n_ctx * r->n_slots;
                r->info.n_ctx = alone;
            }
        }
    }
    if (params->kv_pool > 0 && r->batched) r->info.kv_pool = params->kv_pool;
    if (r->info.kv_pool > (int64_t)r->info.n_ctx * r->n_slots) r->info.kv_pool = 0; /* no smaller than reserving all */
    if (r->info.kv_pool > UINT32_MAX) r->info.kv_pool = UINT32_MAX;
    r->cp.n_ctx = (uint32_t)r->info.n_ctx;
    if (params->alias) {
        snprintf(r->info.model_name, sizeof r->info.model_name, "%s", params->alias);
    } else {
        const char *base = strrchr(model_path, '/');
        snprintf(r->info.model_name, sizeof r->info.model_name, "%s", base ? base + 1 : model_path);
    }
    snprintf(r->info.model_path, sizeof r->info.model_path, "%s", model_path);
    muse_model_desc(r->model, r->info.desc, sizeof r->info.desc);
    snprintf(r->info.kv_type, sizeof r->info.kv_type, "%s", muse_kv_type_name(r->cp.kv_type));
    r->info.n_batch = (int)(r->cp.n_batch ? r->cp.n_batch : muse_context_default_params().n_batch);
    r->info.n_threads = (int)muse_context_params_threads(r->cp);
    r->info.n_embd = muse_model_n_embd(r->model);
    r->pooling = (enum muse_pooling)(params->pooling >= 0 ? params->pooling
                                     : muse_model_pooling(r->model) > 0 ? muse_model_pooling(r->model)
                                                                        : MUSE_POOLING_LAST);
    snprintf(r->info.pooling, sizeof r->info.pooling, "%s", muse_pooling_name(r->pooling));
    r->info.n_layer = muse_model_n_layer(r->model);
    if (params->mmproj) {
        struct muse_vision_params vp = muse_vision_default_params();
        vp.n_threads = r->cp.n_threads;
        vp.backend = r->cp.backend;
        if ((st = muse_vision_load(params->mmproj, vp, &r->vision, err)) != MUSE_OK) goto fail;
        if ((st = muse_media_cache_create(r->vision, muse_model_n_embd(r->model), MUSE_MEDIA_CACHE_DEFAULT_BYTES,
                                          &r->media, err)) != MUSE_OK) {
            muse_error_prefix(err, "%s: ", params->mmproj);
            goto fail;
        }
        if (muse_tokenizer_find(r->tok, "<|image_start|>", 15) < 0 || muse_tokenizer_find(r->tok, "<|image_end|>", 13) < 0) {
            st = muse_error_set(err, MUSE_ERR_MISSING, "%s has no <|image_start|>/<|image_end|> tokens: it cannot read images",
                                model_path);
            goto fail;
        }
        r->image_max_tokens = params->image_max_tokens;
        r->info.vision = true;
    }
    out->ops = &model_ops;
    out->self = r;
    return MUSE_OK;
fail:
    model_destroy(r);
    return st;
}
