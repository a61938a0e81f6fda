/*
 * api_fields.c - OpenAI request fields beyond sampling: the log-probability requests
 * (chat logprobs/top_logprobs, completions logprobs/echo) and the fields muse cannot honour,
 * which get a 400 naming them instead of being ignored (docs/server.md, "Fields").
 */
#include <stdio.h>
#include <string.h>

#include "server/server_int.h"

#define MAX_TOP_LOGPROBS 20

static bool present(const cJSON *v) { return v && !cJSON_IsNull(v); }

bool muse_srv_check_unsupported(const cJSON *req, bool chat, char *msg, size_t cap, const char **param) {
    const cJSON *v;
#define FAIL(field, ...)                        \
    do {                                        \
        snprintf(msg, cap, __VA_ARGS__);        \
        *param = field;                         \
        return false;                           \
    } while (0)
    v = cJSON_GetObjectItemCaseSensitive(req, "n");
    if (present(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        FAIL("n", "'n' must be 1: muse generates one choice per request (send several requests instead)");
    v = cJSON_GetObjectItemCaseSensitive(req, "logit_bias");
    if (present(v) && !(cJSON_IsObject(v) && !v->child))
        FAIL("logit_bias", "'logit_bias' is not supported by muse's sampler");
    v = cJSON_GetObjectItemCaseSensitive(req, "response_format");
    if (present(v)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            FAIL("response_format", "'response_format' other than {\"type\": \"text\"} is not supported: muse has no "
                                    "constrained (JSON) decoding");
    }
    static const char *const never[] = {"audio", "prediction", "functions", "function_call", "suffix_tokens"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (present(cJSON_GetObjectItemCaseSensitive(req, never[i])))
            FAIL(never[i], "'%s' is not supported by muse%s", never[i],
                 !strncmp(never[i], "function", 8) ? " (use 'tools' and 'tool_choice')" : "");
    v = cJSON_GetObjectItemCaseSensitive(req, "modalities");
    if (present(v)) {
        const cJSON *m;
        bool ok = cJSON_IsArray(v);
        cJSON_ArrayForEach(m, v) ok &= cJSON_IsString(m) && !strcmp(m->valuestring, "text");
        if (!ok) FAIL("modalities", "'modalities' may only be [\"text\"]");
    }
    if (!chat) {
        v = cJSON_GetObjectItemCaseSensitive(req, "best_of");
        if (present(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
            FAIL("best_of", "'best_of' must be 1: muse generates one choice per request");
        v = cJSON_GetObjectItemCaseSensitive(req, "suffix");
        if (present(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            FAIL("suffix", "'suffix' (fill in the middle) is not supported by muse");
    }
#undef FAIL
    return true;
}

bool muse_srv_parse_logprobs(const cJSON *req, bool chat, struct srv_gen_opts *o, struct muse_srv_job *job, char *msg,
                             size_t cap, const char **param) {
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(req, "logprobs");
    if (chat) {
        const cJSON *top = cJSON_GetObjectItemCaseSensitive(req, "top_logprobs");
        if (present(lp) && !cJSON_IsBool(lp)) {
            snprintf(msg, cap, "'logprobs' must be a boolean");
            *param = "logprobs";
            return false;
        }
        o->logprobs = cJSON_IsTrue(lp);
        if (present(top)) {
            if (!cJSON_IsNumber(top) || top->valuedouble != (double)top->valueint || top->valueint < 0 ||
                top->valueint > MAX_TOP_LOGPROBS) {
                snprintf(msg, cap, "'top_logprobs' must be an integer in 0..%d", MAX_TOP_LOGPROBS);
                *param = "top_logprobs";
                return false;
            }
            if (!o->logprobs) {
                snprintf(msg, cap, "'top_logprobs' needs 'logprobs': true");
                *param = "top_logprobs";
                return false;
            }
            o->top_logprobs = top->valueint;
        }
    } else {
        if (present(lp)) {
            if (!cJSON_IsNumber(lp) || lp->valuedouble != (double)lp->valueint || lp->valueint < 0 ||
                lp->valueint > MAX_TOP_LOGPROBS) {
                snprintf(msg, cap, "'logprobs' must be an integer in 0..%d (alternatives per token)", MAX_TOP_LOGPROBS);
                *param = "logprobs";
                return false;
            }
            o->logprobs = true;
            o->top_logprobs = lp->valueint;
        }
        const cJSON *echo = cJSON_GetObjectItemCaseSensitive(req, "echo");
        if (present(echo) && !cJSON_IsBool(echo)) {
            snprintf(msg, cap, "'echo' must be a boolean");
            *param = "echo";
            return false;
        }
        if (cJSON_IsTrue(echo) && o->logprobs) {
            snprintf(msg, cap, "'echo' with 'logprobs' is not supported: muse does not compute the prompt's "
                               "log probabilities");
            *param = "echo";
            return false;
        }
    }
    /* the adapter reports the sampled token's probability alongside a top list of at least one */
    if (o->logprobs) job->n_probs = o->top_logprobs > 0 ? o->top_logprobs : 1;
    return true;
}
