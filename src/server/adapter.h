/*
 * adapter.h - the narrow interface between `muse serve` and what generates tokens: the model
 * adapter (adapter_model.c: libmuse's model, tokenizer, chat template, sampler and one session per
 * slot, src/gen/session.h, the slots batched by a stepper, muse.h, continuous batching) or, for tests only, the scripted adapter (adapter_scripted.c,
 * `--test-script FILE`: byte tokens and scripted output, no model).
 *
 * The server (HTTP, slots, queue, streaming, parsing) never calls the model, tokenizer or chat
 * template directly; it goes through this table, which says only what the server needs.
 *
 * Threading: `tokenize`, `token_piece`, `is_eog`, `render_chat` and `info` may be called from
 * any thread at any time (HTTP threads). Slot functions are called by one worker thread per slot;
 * different slots may run concurrently, so an adapter whose forward is not reentrant across slots
 * must serialise internally (the model adapter's batched slots meet in its stepper, which runs
 * their evaluations together; unbatched, they share only the read-only model).
 *
 * A request on a slot is always: slot_keep (drop what the new prompt does not share), slot_reserve
 * (the whole prompt), slot_eval of the rest of the prompt (in chunks), slot_begin, then
 * slot_sample / slot_eval(1 token) alternating, and slot_done once it is over. A slot_eval error
 * is followed by slot_keep(0).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gen/constrain.h"
#include "gen/sampler.h"
#include "gen/session.h"
#include "muse.h"
#include "speculative/spec.h"

struct cJSON;

/* One entry of a top-k probability list (softmax of the model's logits, before the sampling chain). */
struct muse_srv_prob {
    int32_t token;
    float prob;
};

struct muse_srv_adapter_info {
    char model_name[256]; /* what /v1/models advertises */
    int n_ctx;            /* context of one slot, in tokens */
    int n_ctx_train;      /* the model's trained context */
    int n_vocab;
    bool vision;          /* images accepted (a vision projector is loaded: media_prompt works) */
    /* for /props, /api/show and -v (the scripted adapter leaves them empty) */
    char desc[256];            /* one line: architecture, size, type (muse_model_desc) */
    char model_path[512];
    char kv_type[8];           /* "f16" ... */
    int n_threads, n_batch;
    int n_embd, n_layer;
    const char *chat_template; /* the template's source text, "" for the built-in one; lives as long as the adapter */
    char pooling[8];           /* how `embed` pools ("mean", "last", ...); "" without embeddings */
    bool batched;              /* the slots' evaluations run as one forward per step (continuous batching) */
    int64_t kv_pool;           /* batched with a paged KV: the pool's cells (0: every slot holds n_ctx) */
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

struct muse_srv_adapter_ops {
    /* Free everything the adapter owns. Slots must already be freed. */
    void (*destroy)(void *self);
    void (*info)(void *self, struct muse_srv_adapter_info *out);

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
    /* Optional (NULL: nothing to do): the slot's request is over (after its last slot function;
     * the next request starts with slot_keep). The model adapter's batched slots stop taking part
     * in the shared steps until then. */
    void (*slot_done)(void *slot);
    /*
     * Keep the first n_keep cached positions (clamped to what the slot holds) and drop the rest,
     * as far as the slot can: the result says how many are kept and how (src/gen/session.h: in
     * place; a sliding-window miss served by a checkpoint, possibly below n_keep; or a miss that
     * restarts at 0). Never fails.
     */
    struct muse_session_keep (*slot_keep)(void *slot, int n_keep);
    /* Optional: make sure the slot's cache can grow to n_pos positions now (a paged KV pool's cells
     * taken for the whole prompt before its first chunk, so that a prompt the pool cannot hold
     * fails at once instead of taking cells a running request needs). Errors: CONTEXT (the pool is
     * full even after evicting idle slots' caches). */
    muse_status (*slot_reserve)(void *slot, int n_pos, struct muse_error *err);
    /* Append n tokens at the end of the cache and evaluate them; logits of the last one remain.
     * On error nothing was appended. */
    muse_status (*slot_eval)(void *slot, const int32_t *toks, int n, struct muse_error *err);
    /*
     * The prompt is in the cache: start generating with sampling parameters *sp (read during the
     * call only; a sampler of this request, seeded with sp->seed, whose penalties see only the
     * tokens generated from now on). The model adapter also checkpoints its sliding-window rings
     * here, where the next request's prompt is most likely to diverge. Errors: INVALID_ARG (bad
     * parameters), NOMEM.
     */
    muse_status (*slot_begin)(void *slot, const struct muse_sampler_params *sp, struct muse_error *err);
    /*
     * Sample the next token from the logits of the last evaluated position (after slot_begin).
     * When n_probs > 0, probs[0..n_probs) receives the top-n_probs list (sorted, descending) and
     * probs[n_probs] the sampled token with its probability (so the buffer holds n_probs + 1).
     */
    muse_status (*slot_sample)(void *slot, int n_probs, struct muse_srv_prob *probs, int32_t *tok,
                               struct muse_error *err);

    /* ---- images (NULL in an adapter without vision; info.vision says which) ---- */
    /*
     * A rendered prompt with images (any thread): text holds one `<__media__>` marker per image;
     * the result is the prompt's ids (*toks malloc'd: image rows as negative ids derived from the
     * image's content hash, so prefix reuse compares images by content) and *media, the adapter's
     * handle of that prompt (free with media_free). images: taken (freed here, also on error).
     * Errors: INVALID_ARG (marker/image count), those of the tokenizer and the image geometry.
     */
    muse_status (*media_prompt)(void *self, const char *text, size_t len, struct muse_image *images, int n_images,
                                void **media, int32_t **toks, int *n_toks, struct muse_error *err);
    void (*media_free)(void *self, void *media);
    /* slot_eval of positions from..from+n of a media prompt (the slot holds exactly `from`); the
     * images' rows are made (or found in the adapter's rows cache) as needed. */
    muse_status (*slot_eval_media)(void *slot, void *media, int from, int n, struct muse_error *err);
    /* Counters of the rows cache (any thread): tower runs, images found in the cache, merged tokens
     * encoded, seconds in preprocessing + the tower. */
    void (*media_stats)(void *self, uint64_t *encodes, uint64_t *hits, uint64_t *tokens, double *seconds);
    /*
     * Optional (NULL: no speculative decoding): the slot's speculative counters since the last call
     * (then zeroed): drafts verified, of them accepted, verify steps. For /metrics, read by the
     * slot's worker after a job.
     */
    void (*slot_spec_counts)(void *slot, uint64_t *drafted, uint64_t *accepted, uint64_t *steps);
    /* Optional (NULL: no batching): the batched slots' counters (muse.h, continuous batching) - forwards, rows in
     * them, forwards shared by two or more slots, prompt chunks cut at a step's budget. Any thread. */
    void (*batch_stats)(void *self, uint64_t *steps, uint64_t *rows, uint64_t *shared, uint64_t *splits,
                        uint64_t *preempted);
    /* Optional: KV cells in use and in all over the slots: a paged pool's (muse_context_kv_cells),
     * else used -1 (not told) and slots x n_ctx. Any thread; a snapshot. */
    void (*kv_cells)(void *self, int64_t *used, int64_t *total);
    /*
     * Constrained decoding (gen/constrain.h). grammar_compile: a request's grammar (GBNF or a
     * JSON Schema) compiled against the vocabulary, any thread; errors name the grammar's line
     * and column or the schema keyword (FORMAT / UNSUPPORTED: the client's fault), NOMEM.
     * slot_constrain (after slot_begin): constrain this request's sampling by g (borrowed until
     * the next slot_begin or slot_constrain; NULL drops the constraint); triggers NULL = from the
     * first token, else armed once the text (seed: the end of the prompt, then the generated
     * pieces) ends with one of the NULL-terminated triggers. Either op may be NULL: the adapter
     * cannot constrain (the server answers such requests with an error).
     */
    muse_status (*grammar_compile)(void *self, enum muse_grammar_syntax syntax, const char *text, size_t len,
                                   struct muse_grammar **out, struct muse_error *err);
    muse_status (*slot_constrain)(void *slot, const struct muse_grammar *g, const char *const *triggers,
                                  const char *seed, struct muse_error *err);
    /*
     * Optional (NULL: no embeddings): the embeddings of n_inputs inputs toks[i][0..n[i]) (any thread;
     * calls are serialised), computed together (muse_embed_batch: the inputs share forwards), pooled
     * as info.pooling and normalized as muse_embed's `normalize`; out: [n_inputs][info.n_embd].
     * Errors: those of muse_embed_batch (CONTEXT: an input longer than info.n_ctx), NOMEM.
     */
    muse_status (*embed)(void *self, const int32_t *const *toks, const int32_t *n, int n_inputs, int normalize, float *out,
                         struct muse_error *err);
};

/* An adapter: an ops table plus its state. */
struct muse_srv_adapter {
    const struct muse_srv_adapter_ops *ops;
    void *self;
};

/*
 * TEST-ONLY adapter: deterministic scripted output, no model. script_path names a JSON file
 * (see docs/server.md "Test-only scripted adapter"); NULL = built-in defaults (echo). Its slots
 * simulate a sliding-window ring of the script's n_swa/ring_rows with the cache's own rollback rule
 * (muse_kv_ring_can_truncate) and no checkpoints: a miss restarts at 0.
 * On success *out is filled; free with out->ops->destroy(out->self).
 */
muse_status muse_srv_scripted_adapter_create(const char *script_path, struct muse_srv_adapter *out,
                                             struct muse_error *err);

/* Options of the model adapter. */
struct muse_srv_model_params {
    int n_ctx;   /* context per slot; 0 = muse_context_auto_n_ctx over n_slots (the model's trained
                    context capped by the memory available) */
    int n_batch; /* most tokens per forward call; 0 = libmuse's default. Sliding-window rings hold
                    n_swa + n_batch rows, so it also bounds how far a slot can rewind in place */
    const char *mmproj;     /* vision projector GGUF, or NULL: no images */
    int image_max_tokens;   /* merged tokens per image at most; 0 = 4096 */
    const char *draft_path;        /* a DFlash drafter (speculative decoding in every slot), or NULL */
    struct muse_spec_params spec;  /* its settings (used with draft_path; muse_spec_default_params()) */
    const struct muse_context_params *cparams; /* threads, KV type, backend ... (NULL = defaults);
                                                  n_ctx and n_batch above win over its own */
    const struct muse_model_params *mparams;   /* NULL = muse_model_default_params() */
    int n_slots;                /* slots that share the memory (the automatic n_ctx); < 1 = 1. With more
                                   than one and no drafter the slots are batched: one context holds a
                                   sequence per slot and their evaluations run as one forward per step
                                   (muse.h, continuous batching) */
    bool no_batching;           /* each slot a context of its own, evaluated on its own thread */
    int prefill_step;           /* batched: prompt rows per step while other slots take part; 0 = the
                                   stepper's default (muse_stepper_params.n_prefill_rows) */
    int64_t kv_pool;            /* batched: the slots' KV is paged, from a pool of this many cells
                                   (context params.n_ctx_pool); 0 = automatic: a pool when n_ctx is
                                   automatic and the memory available cannot hold every slot at the
                                   context one slot could have alone */
    const char *alias;          /* the model id; NULL = the file's base name */
    const char *chat_template;  /* [chat_template_len] Jinja text instead of the file's template; NULL = the file's */
    size_t chat_template_len;
    const char *chat_template_path; /* its file name, for messages */
    int pooling;                /* embeddings: enum muse_pooling, or -1: the file's pooling_type, else last
                                   (none cannot serve an embeddings request) */
};

/*
 * The adapter over a GGUF model (adapter_model.c). On success *out is filled; free with
 * out->ops->destroy(out->self). Errors: those of muse_model_load, the tokenizer and the chat
 * template; MUSE_ERR_INVALID_ARG for an n_ctx above the model's.
 */
muse_status muse_srv_model_adapter_create(const char *model_path, const struct muse_srv_model_params *params,
                                          struct muse_srv_adapter *out, struct muse_error *err);
