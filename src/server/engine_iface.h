/*
 * engine_iface.h - the narrow interface between `muse serve` and an inference engine.
 *
 * The server (HTTP, slots, queue, streaming, parsing) never calls the model, tokenizer or chat
 * template directly; it goes through this table. Two implementations exist:
 *   - fake_engine.c: TEST-ONLY, scripted deterministic token sequences (`--test-script FILE`);
 *   - engine_real.c: the adapter to libmuse's tokenizer / chat template / forward, when present.
 *
 * Threading: `tokenize`, `token_piece`, `is_eog`, `render_chat` and `info` may be called from
 * any thread at any time (HTTP threads). Slot functions are called by one worker thread per slot;
 * different slots may run concurrently, so an engine whose forward is not reentrant across slots
 * must serialise internally.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "muse.h"

struct cJSON;

/* Sampling parameters of one request (OpenAI/llama.cpp names). temperature 0 = greedy. */
struct muse_srv_sampling {
    float temperature;
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    int top_k;               /* 0 = off */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
    uint64_t seed;
};

/* One entry of a top-k probability list (probabilities after the sampling chain's softmax). */
struct muse_srv_prob {
    int32_t token;
    float prob;
};

struct muse_srv_engine_info {
    char model_name[256]; /* what /v1/models advertises */
    int n_ctx;            /* context of one slot, in tokens */
    int n_ctx_train;      /* the model's trained context */
    int n_vocab;
};

/* What the chat template needs from a /v1/chat/completions request (borrowed pointers). */
struct muse_srv_chat_input {
    const struct cJSON *messages;   /* validated array of message objects */
    const struct cJSON *tools;      /* array of OpenAI tool objects, or NULL */
    const char *reasoning_strength; /* "low" | "medium" | "high" | "xhigh"; NULL: the template's default */
    /* chat_template_kwargs: extra template variables (an object; the names the server sets itself
     * - messages, tools, add_generation_prompt, bos/eos_token, documents - already removed), or NULL */
    const struct cJSON *template_kwargs;
};

struct muse_srv_engine_ops {
    /* Free everything the engine owns. Slots must already be freed. */
    void (*destroy)(void *self);
    void (*info)(void *self, struct muse_srv_engine_info *out);

    /* text -> token ids (*toks malloc'd, caller frees). */
    muse_status (*tokenize)(void *self, const char *text, size_t len, bool add_special, bool parse_special,
                            int32_t **toks, int *n_toks, struct muse_error *err);
    /*
     * The bytes of one token (special tokens as their text, e.g. "<|eom|>"). Writes at most cap
     * bytes to buf and returns the full length (which may exceed cap), or -1 for an id outside
     * the vocabulary. Pieces may split a UTF-8 sequence; the server reassembles.
     */
    int (*token_piece)(void *self, int32_t tok, char *buf, int cap);
    /* True for the stop set (<|eot|>, <|end_of_text|>): never <|eom|>. */
    bool (*is_eog)(void *self, int32_t tok);
    /* Render a conversation + generation prompt to text (*prompt malloc'd, caller frees). */
    muse_status (*render_chat)(void *self, const struct muse_srv_chat_input *in, char **prompt,
                               struct muse_error *err);

    /* A fresh slot (its own KV cache of info.n_ctx positions), or NULL with err set. */
    void *(*slot_create)(void *self, struct muse_error *err);
    void (*slot_free)(void *slot);
    /*
     * Keep the first n_keep cached positions and drop the rest. Returns how many positions are
     * actually kept: at most n_keep, less when the engine cannot rewind that far (a sliding-window
     * ring whose rows were overwritten restarts from its last safe point, possibly 0).
     */
    int (*slot_keep)(void *slot, int n_keep);
    /* Append n tokens at the end of the cache and evaluate them; logits of the last one remain. */
    muse_status (*slot_eval)(void *slot, const int32_t *toks, int n, struct muse_error *err);
    /*
     * Sample the next token from the logits of the last evaluated position. history holds the
     * tokens generated so far in this request (for penalties); *rng is the request's RNG state.
     * When n_probs > 0, probs[0..n_probs) receives the top-n_probs list (sorted, descending).
     */
    muse_status (*slot_sample)(void *slot, const struct muse_srv_sampling *sp, const int32_t *history,
                               int n_history, uint64_t *rng, int n_probs, struct muse_srv_prob *probs,
                               int32_t *tok, struct muse_error *err);
};

/* An engine: an ops table plus its state. */
struct muse_srv_engine {
    const struct muse_srv_engine_ops *ops;
    void *self;
};

/*
 * The longest prefix a sliding-window cache can keep when rewinding from n_cached to n_keep
 * positions. A ring of ring_rows rows holding the last rows of an n_swa window can rewind by at
 * most ring_rows - n_swa - 1 positions once it has wrapped (n_cached > ring_rows); beyond that the
 * window rows the kept prefix needs are overwritten and the only safe point is 0 (no checkpoints).
 * n_swa <= 0 means no sliding window (any n_keep is safe). Pure; thread-safe.
 */
int muse_srv_swa_safe_keep(int n_cached, int n_keep, int n_swa, int ring_rows);

/*
 * TEST-ONLY engine: deterministic scripted output, no model. script_path names a JSON file
 * (see docs/server.md "Test-only scripted engine"); NULL = built-in defaults (echo).
 * On success *out is filled; free with out->ops->destroy(out->self).
 */
muse_status muse_srv_fake_engine_create(const char *script_path, struct muse_srv_engine *out, struct muse_error *err);

/* Options of the real engine. */
struct muse_srv_real_params {
    int n_ctx;   /* context per slot; 0 = min(4096, the model's) */
    int n_batch; /* most tokens per forward call; 0 = libmuse's default. Sliding-window rings hold
                    n_swa + n_batch rows, so it also bounds how far a slot can rewind in place */
};

/*
 * The engine over a real GGUF model (engine_real.c). On success *out is filled; free with
 * out->ops->destroy(out->self).
 */
muse_status muse_srv_real_engine_create(const char *model_path, const struct muse_srv_real_params *params,
                                        struct muse_srv_engine *out, struct muse_error *err);
