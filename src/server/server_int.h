/* server_int.h - what the server's translation units share (not a public header). */
#pragma once

#include <cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "server/buf.h"
#include "server/gate.h"
#include "server/metrics.h"
#include "server/sched.h"
#include "server/server.h"

struct srv_req;

struct muse_server {
    struct muse_server_params p;
    char *api_key;
    char *host;
    char **cors;          /* [p.n_cors] owned copies */
    char **allow_hosts;   /* [p.n_allow_hosts] owned copies */
    bool check_host;      /* bound to a loopback address: Host must name it (DNS rebinding) */
    int port;
    struct MHD_Daemon *daemon;
    struct muse_srv_gate *gate;
    atomic_bool ready;    /* adapter attached and slots running */
    atomic_bool stopping; /* shutdown started */
    struct muse_srv_adapter ad;
    struct muse_srv_adapter_info info;
    struct muse_srv_sched *sched;
    struct muse_srv_metrics metrics;
    atomic_uint_fast64_t next_id;
    atomic_int active;    /* requests not yet freed (shutdown lets them finish) */
    atomic_size_t body_bytes; /* request bodies buffered now (the budget: body_budget) */
    size_t body_budget;
    uint64_t id_base;     /* start time, so ids differ across restarts */
    long long created;    /* unix time at start */

    /* requests waiting for something (work, a job, a stream's next piece): park_mu guards the
     * list and every srv_req field marked "park" (lock order: a job's mu is never held with it) */
    pthread_mutex_t park_mu;
    struct srv_req *parked;
    bool no_suspend;      /* shutdown: nothing is suspended any more */

    /* the work pool: POST requests are parsed and prepared here, off the event loops */
    pthread_mutex_t work_mu;
    pthread_cond_t work_cv;
    struct srv_req *work_head, *work_tail;
    bool work_stop;
    pthread_t *work_th;
    int n_work_th;
};

struct srv_dialect;

/* The fields a generating endpoint formats; filled from a job under its mutex. */
struct srv_gen_opts {
    const struct srv_dialect *dialect; /* how the reply is written */
    bool stream;
    bool include_usage;   /* chat/completions stream_options.include_usage */
    bool return_tokens;   /* native */
    bool logprobs;        /* chat `logprobs: true` / completions `logprobs: N`: choices[].logprobs */
    int top_logprobs;     /* alternatives per token in them (chat top_logprobs, completions N) */
    bool hide_thinking;   /* Ollama `think: false`: the reasoning is not returned */
    char id[64];
};

enum srv_req_state { SRV_REQ_NEW, SRV_REQ_WORK, SRV_REQ_WAIT, SRV_REQ_READY };

/*
 * One HTTP request (MHD's per-request context). Reference counted: MHD's request (dropped when it
 * completes), the work queue while it holds it, a streaming response while it exists. Fields the
 * event-loop thread and a worker share are marked "park" (srv->park_mu); a worker fills resp, job
 * and fail before it sets work_done (under park_mu), and the event loop reads them only after.
 */
struct srv_req {
    struct muse_server *srv;
    struct MHD_Connection *conn;
    struct muse_srv_conn *gc; /* the gate's record of the connection (may be NULL) */
    int fd;                  /* the connection's socket, for disconnect checks */
    atomic_int refs;
    char method[16];
    char *url;               /* owned copy */
    int64_t t0_us;           /* when the request started (the request log) */
    char origin[256];        /* the Origin header ("" when absent) */
    struct muse_srv_buf body;
    size_t body_reserved;    /* bytes of srv->body_budget held */
    bool too_large, over_budget;
    bool read_done;          /* the request has been read completely */
    bool answered;           /* a response was queued on the connection */
    bool fail;               /* close the connection without an answer (out of memory) */
    const char *allow;       /* the Allow header of a 405 */
    enum MHD_Result (*work_fn)(struct srv_req *); /* the endpoint to run on the work pool */
    enum srv_req_state state;
    struct MHD_Response *resp; /* the prepared reply, queued by the event loop */
    unsigned status;
    struct muse_srv_job *job;  /* park: a submitted generation (a reference) */
    struct srv_gen_opts o;     /* how to format a non-streaming generation's reply */
    struct srv_req *park_prev, *park_next, *work_next;
    bool parked, suspended, wake_pending, gone, closed, work_done; /* park */
    bool stream;             /* park: the attached job streams (woken on every token) */
    char *echo;              /* completions `echo`: the prompt's text, put before the answer (owned) */
};

/*
 * A streaming reply: api_common.c runs it as MHD's content reader on the connection's event loop,
 * where it never blocks (with nothing new it parks the connection until the scheduler's news hook
 * wakes it). Holds a reference on the request (for parking) and on the job. The dialect's collect
 * appends the next events to `out` and advances the cursors of what has been sent.
 */
struct srv_stream {
    struct muse_server *srv;
    struct srv_req *r;
    struct muse_srv_job *job;
    struct srv_gen_opts o;
    size_t sent_content, sent_reasoning;
    int sent_calls, sent_toks, sent_lp; /* sent_lp: tokens whose logprobs were sent */
    bool sent_role, sent_echo, finished;
    struct muse_srv_buf out;
    size_t out_pos;
};

/*
 * A generating API's reply format (its dialect): one table per endpoint, defined in the file of its
 * API (api_openai.c, api_native.c, api_ollama.c). api_common.c runs the job and writes the reply
 * through the table, without asking which dialect it is. Both functions run with job->mu held.
 */
struct srv_dialect {
    bool chat;               /* messages in, a message out (OpenAI chat, Ollama /api/chat) */
    const char *stream_type; /* the Content-Type of a stream */
    /* The answer of a finished job as JSON text (malloc'd; NULL = out of memory); echo: the prompt
     * text a completion puts before its own (NULL: none). */
    char *(*reply)(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o, const char *echo);
    /* Append what is new past st's cursors to st->out and advance them; set st->finished after the
     * last event. Called when the job is done or has news: text, tool calls or logprobs past the
     * cursors, or what more_news (NULL: nothing else) reports. */
    void (*collect)(struct srv_stream *st);
    bool (*more_news)(const struct srv_stream *st);
};
extern const struct srv_dialect muse_srv_dialect_chat, muse_srv_dialect_completions, muse_srv_dialect_native,
    muse_srv_dialect_ollama_chat, muse_srv_dialect_ollama_generate;

/* Server-sent events of a stream: `data: TEXT` (takes text; NULL writes nothing), `data: JSON` (takes
 * obj), and the error event of a failed or cancelled job. */
void muse_srv_sse_text(struct srv_stream *st, char *text);
void muse_srv_sse(struct srv_stream *st, cJSON *obj);
void muse_srv_sse_error(struct srv_stream *st);

/* llama-server's "timings" of a job (job->mu held), which the OpenAI and native dialects report. */
cJSON *muse_srv_timings_json(const struct muse_srv_job *job);

/*
 * Reply helpers: each prepares the request's response (the event loop queues it) and counts it in
 * the metrics. Callable from the event loop or a worker, once per request. MHD_NO only when even
 * that failed (out of memory): the connection is then closed without an answer.
 */
enum MHD_Result muse_srv_reply_json(struct srv_req *r, unsigned status, cJSON *obj); /* takes obj */
/* Reply with resp (ownership moves; the common headers are added). ctype may be NULL. */
enum MHD_Result muse_srv_reply_response(struct srv_req *r, unsigned status, struct MHD_Response *resp,
                                        const char *ctype);
enum MHD_Result muse_srv_reply_error(struct srv_req *r, unsigned status, const char *type, const char *param,
                                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Take / drop a reference on r (the last one frees it). Any thread. */
void muse_srv_req_ref(struct srv_req *r);
void muse_srv_req_release(struct srv_req *r);

/*
 * Parking, for the event loop's thread of r's connection (its access handler or its response's
 * content reader) when r waits for something another thread produces: PARK_SUSPENDED = the
 * connection is suspended (return and wait to be called again); PARK_RETRY = something changed
 * since the last look (look again); PARK_REFUSED = the client is gone or the server stops (end
 * the response). What r waits for wakes it: the work pool when it has prepared r, the scheduler's
 * news hook for an attached job, the disconnect watcher.
 */
enum srv_park { SRV_PARK_SUSPENDED, SRV_PARK_RETRY, SRV_PARK_REFUSED };
enum srv_park muse_srv_park(struct srv_req *r);
/* Is the client of r gone (seen by the disconnect watcher)? */
bool muse_srv_req_gone(struct srv_req *r);
/*
 * Attach a job to r before submitting it, so the scheduler's news wakes r (and a disconnect cancels
 * it). Takes a reference on job. False when the connection is already closed (nothing attached).
 */
bool muse_srv_req_attach_job(struct srv_req *r, struct muse_srv_job *job, bool stream);
/*
 * The scheduler's news hook (sched.h job->notify): wakes the request the job is attached to, on
 * every token for a stream, else only when the job is done (a wake per token for a request that
 * only wants the end took ~30% of the slots' decode speed on 2 cores).
 */
void muse_srv_job_news(void *srv, struct muse_srv_job *job, bool done);

/*
 * Submit job (the caller's reference moves) and answer the request: a stream's response is prepared
 * at once (its content reader parks between pieces); a non-streaming request waits (state WAIT)
 * until muse_srv_reply_job can format the finished job. Runs on the work pool.
 */
enum MHD_Result muse_srv_run_job(struct srv_req *r, struct muse_srv_job *job, const struct srv_gen_opts *o);
/* The reply of r's finished non-streaming job (event loop; r->job done). */
enum MHD_Result muse_srv_reply_job(struct srv_req *r);

/*
 * Parse the sampling/stop/limit fields shared by every generating endpoint into job. On a bad
 * value writes a message to msg (and the offending field to *param) and returns false.
 */
bool muse_srv_parse_common(struct muse_server *srv, const cJSON *req, struct muse_srv_job *job, bool openai,
                           char *msg, size_t cap, const char **param);

/*
 * The prompt of a chat request into job (api_chat.c, for every chat dialect): messages with image_url parts (base64 data: URIs) become
 * the adapter's media prompt (job->media; 400 for remote URLs, bad images, no projector), others
 * are rendered and tokenized. Replies 400/500 itself and returns false on failure.
 */
struct muse_srv_chat_input;
bool muse_srv_chat_prompt(struct srv_req *r, const struct muse_srv_chat_input *chat, struct muse_srv_job *job);

/* Tokenize and check the context; replies 400/500 itself and returns false on failure. */
bool muse_srv_tokenize_prompt(struct srv_req *r, const char *text, bool add_special, struct muse_srv_job *job);
/* The checks of muse_srv_tokenize_prompt on job's prompt (not empty, shorter than a slot); replies 400. */
bool muse_srv_check_prompt(struct srv_req *r, struct muse_srv_job *job);

/*
 * The prompt of a completion request: a string, an array of token ids, or an array holding one
 * string or one id array. Fills job->prompt (tokenizing text). Replies itself on failure.
 */
bool muse_srv_completion_prompt(struct srv_req *r, const cJSON *prompt, bool add_special, struct muse_srv_job *job);
/* Give job a server-unique id and write PREFIX + hex id to out. */
void muse_srv_make_id(struct muse_server *srv, struct muse_srv_job *job, const char *prefix, char *out, size_t cap);

/*
 * The start shared by /completion and /v1/completions: a new job with a "cmpl-" id in o->id and
 * the common parameters of req parsed (openai as for muse_srv_parse_common). On failure it replies
 * (500 out of memory, 400 bad parameter), stores the reply's result in *ret and returns NULL.
 */
struct muse_srv_job *muse_srv_completion_job(struct srv_req *r, const cJSON *req, bool openai, struct srv_gen_opts *o,
                                             enum MHD_Result *ret);

/* A valid UTF-8 copy of s[0..n) (invalid bytes become U+FFFD); malloc'd, NULL on OOM. */
char *muse_srv_utf8_clean(const char *s, size_t n);

/* A token piece as a JSON string (invalid UTF-8 replaced by U+FFFD). */
cJSON *muse_srv_piece_json(struct muse_server *srv, int32_t tok);

/* OpenAI log probabilities (logprobs.c) of generated tokens [from, to), job->mu held. The tokens that
 * have them: [0, muse_srv_logprobs_end) (all generated ones but a final stop token; while a chat job
 * runs, those whose part - answer or not - is decided); chat lists only the answer's tokens. */
int muse_srv_logprobs_end(struct muse_server *srv, const struct muse_srv_job *job);
/* chat: {"content": [{token, logprob, bytes, top_logprobs: [top entries]}], "refusal": null} */
cJSON *muse_srv_chat_logprobs(struct muse_server *srv, const struct muse_srv_job *job, int from, int to, int top);
/* completions: {tokens, token_logprobs, top_logprobs: [{piece: logprob}], text_offset (from text_base)} */
cJSON *muse_srv_completion_logprobs(struct muse_server *srv, const struct muse_srv_job *job, int from, int to, int top,
                                    size_t text_base);

/*
 * Request fields muse does not honour (n > 1, logit_bias, response_format json, best_of, suffix,
 * audio ...): false with a message naming the field in msg and the field in *param (api_fields.c).
 * chat: the chat endpoint's list, else the completions'.
 */
bool muse_srv_check_unsupported(const cJSON *req, bool chat, char *msg, size_t cap, const char **param);
/* chat logprobs/top_logprobs or completions logprobs/echo into o (and job->n_probs); false as above. */
bool muse_srv_parse_logprobs(const cJSON *req, bool chat, struct srv_gen_opts *o, struct muse_srv_job *job, char *msg,
                             size_t cap, const char **param);

/* Endpoint handlers (api_*.c). r->body holds the complete request body. */
enum MHD_Result muse_srv_api_chat(struct srv_req *r);
enum MHD_Result muse_srv_api_completions(struct srv_req *r);
enum MHD_Result muse_srv_api_completion(struct srv_req *r);
enum MHD_Result muse_srv_api_tokenize(struct srv_req *r);
enum MHD_Result muse_srv_api_detokenize(struct srv_req *r);
enum MHD_Result muse_srv_api_apply_template(struct srv_req *r);
/* api_llama.c: GET /props, GET /slots (event loop: constant work), /v1/embeddings (501) */
enum MHD_Result muse_srv_api_props(struct srv_req *r);
enum MHD_Result muse_srv_api_slots(struct srv_req *r);
enum MHD_Result muse_srv_api_embeddings(struct srv_req *r);
/* api_ollama.c: Ollama's /api/chat, /api/generate (POST), /api/show (POST), /api/tags, /api/version,
 * /api/ps (GET) */
enum MHD_Result muse_srv_api_ollama_chat(struct srv_req *r);
enum MHD_Result muse_srv_api_ollama_generate(struct srv_req *r);
enum MHD_Result muse_srv_api_ollama_show(struct srv_req *r);
enum MHD_Result muse_srv_api_ollama_tags(struct srv_req *r);
enum MHD_Result muse_srv_api_ollama_version(struct srv_req *r);
enum MHD_Result muse_srv_api_ollama_ps(struct srv_req *r);
/* A chat job with a JSON schema (job->schema): compile its whole-answer grammar (job->grammar_whole,
 * sched.h). False with msg on failure. */
bool muse_srv_chat_whole_grammar(struct muse_server *srv, struct muse_srv_job *job, char *msg, size_t cap);
/* Parse r->body as a JSON object; replies 400 and returns NULL on malformed input. */
cJSON *muse_srv_parse_body(struct srv_req *r);

/* The chat page (page_data.c, generated by src/server/page/embed.py from page/index.html). */
extern const unsigned char muse_srv_page_index[];
extern const size_t muse_srv_page_index_len;
/* marked.min.js of Debian's libjs-marked (page_vendor.c, embedded at build time). */
extern const unsigned char *const muse_srv_page_marked_js;
extern const size_t muse_srv_page_marked_js_len;
