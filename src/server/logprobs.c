/*
 * logprobs.c - OpenAI's log-probability shapes of a job's generated tokens: chat's
 * choices[].logprobs.content entries (the answer's tokens only: not the channel header, the
 * reasoning or a tool call) and the legacy completions' parallel arrays (every token). The job keeps,
 * per generated token, the top n_probs of softmax(logits) and the sampled token's own probability
 * (sched.h: probs); these functions only format (job->mu held by the caller).
 */
#include <math.h>
#include <string.h>

#include "server/server_int.h"

/* log(p), with OpenAI's floor for a probability that underflowed. */
static double logprob(float p) { return p > 0 ? log((double)p) : -9999.0; }

/* The raw bytes of a token (for "bytes"), at most cap; returns the length. */
static int piece_bytes(struct muse_server *srv, int32_t tok, char *buf, int cap) {
    int n = srv->ad.ops->token_piece(srv->ad.self, tok, buf, cap);
    if (n < 0) n = 0;
    return n > cap ? cap : n;
}

int muse_srv_logprobs_end(struct muse_server *srv, const struct muse_srv_job *job) {
    int n = job->n_out;
    /* chat: only the tokens whose part (answer or not) is decided */
    if (job->out_raw_end && !job->done)
        while (n > 0 && job->out_raw_end[n - 1] > job->raw_decided) n--;
    /* the stop token is no text of the answer: OpenAI lists only what the content is made of */
    if (n > 0 && srv->ad.ops->is_eog(srv->ad.self, job->out_toks[n - 1])) /* always the last: generation ends there */
        n--;
    return n;
}

/* {"token", "logprob", "bytes"} of one token. */
static cJSON *chat_entry(struct muse_server *srv, int32_t tok, float p) {
    char piece[256];
    int n = piece_bytes(srv, tok, piece, sizeof piece);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(e, "token", muse_srv_piece_json(srv, tok));
    cJSON_AddNumberToObject(e, "logprob", logprob(p));
    cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    return e;
}

/* Whether generated token i is part of the answer: always for raw text; for a parsed chat, when a
 * byte of it lies in one of the answer's ranges (not the channel markup, the header, the
 * reasoning or a tool call). */
static bool in_answer(const struct muse_srv_job *job, int i) {
    if (!job->out_raw_end) return true;
    const int lo = i ? job->out_raw_end[i - 1] : 0, hi = job->out_raw_end[i];
    for (int k = 0; k < job->n_answer; k++)
        if (job->answer[k].lo < hi && lo < job->answer[k].hi) return true;
    return false;
}

cJSON *muse_srv_chat_logprobs(struct muse_server *srv, const struct muse_srv_job *job, int from, int to, int top) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(lp, "content");
    cJSON_AddNullToObject(lp, "refusal");
    int stride = job->n_probs + 1;
    if (top > job->n_probs) top = job->n_probs;
    for (int i = from; i < to; i++) {
        if (!in_answer(job, i)) continue;
        const struct muse_srv_prob *pr = job->probs + (size_t)i * (size_t)stride;
        cJSON *e = chat_entry(srv, job->out_toks[i], pr[job->n_probs].prob);
        cJSON *tl = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < top; k++) cJSON_AddItemToArray(tl, chat_entry(srv, pr[k].token, pr[k].prob));
        cJSON_AddItemToArray(content, e);
    }
    return lp;
}

cJSON *muse_srv_completion_logprobs(struct muse_server *srv, const struct muse_srv_job *job, int from, int to, int top,
                                    size_t text_base) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(lp, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(lp, "text_offset");
    int stride = job->n_probs + 1;
    if (top > job->n_probs) top = job->n_probs;
    char piece[256];
    size_t off = text_base; /* the text offset of each token: the bytes of the pieces before it */
    for (int i = 0; i < from; i++) off += (size_t)piece_bytes(srv, job->out_toks[i], piece, sizeof piece);
    for (int i = from; i < to; i++) {
        const struct muse_srv_prob *pr = job->probs + (size_t)i * (size_t)stride;
        cJSON_AddItemToArray(tokens, muse_srv_piece_json(srv, job->out_toks[i]));
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(logprob(pr[job->n_probs].prob)));
        cJSON *t = cJSON_CreateObject();
        for (int k = 0; k < top; k++) {
            cJSON *name = muse_srv_piece_json(srv, pr[k].token);
            /* two tokens may print alike (invalid UTF-8 pieces): the first, most likely, one stays */
            if (name && !cJSON_GetObjectItemCaseSensitive(t, name->valuestring))
                cJSON_AddNumberToObject(t, name->valuestring, logprob(pr[k].prob));
            cJSON_Delete(name);
        }
        cJSON_AddItemToArray(tops, t);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += (size_t)piece_bytes(srv, job->out_toks[i], piece, sizeof piece);
    }
    return lp;
}
