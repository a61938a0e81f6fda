/* api_openai.c - POST /v1/chat/completions and POST /v1/completions (OpenAI shapes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "server/server_int.h"

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

/* Check a message's content: a string, null, or an array of text parts. */
static bool valid_content(const cJSON *content, bool null_ok, char *msg, size_t cap, int i) {
    if (!content || cJSON_IsNull(content)) {
        if (!null_ok) snprintf(msg, cap, "messages[%d].content is required", i);
        return null_ok;
    }
    if (cJSON_IsString(content)) return true;
    if (!cJSON_IsArray(content)) {
        snprintf(msg, cap, "messages[%d].content must be a string or an array of content parts", i);
        return false;
    }
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsString(type)) {
            snprintf(msg, cap, "messages[%d].content parts need a string 'type'", i);
            return false;
        }
        if (strcmp(type->valuestring, "text")) {
            snprintf(msg, cap, "messages[%d]: content part type '%.40s' is not supported (text only)", i, type->valuestring);
            return false;
        }
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(part, "text"))) {
            snprintf(msg, cap, "messages[%d]: a text part needs a string 'text'", i);
            return false;
        }
    }
    return true;
}

static bool valid_messages(const cJSON *messages, char *msg, size_t cap) {
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0) {
        snprintf(msg, cap, "'messages' must be a non-empty array");
        return false;
    }
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            snprintf(msg, cap, "messages[%d] must be an object with a string 'role'", i);
            return false;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (!known) {
            snprintf(msg, cap, "messages[%d].role '%.40s' is not one of system, developer, user, assistant, tool", i,
                     role->valuestring);
            return false;
        }
        bool assistant = !strcmp(role->valuestring, "assistant");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!valid_content(cJSON_GetObjectItemCaseSensitive(m, "content"), assistant, msg, cap, i)) return false;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (rc && !cJSON_IsString(rc) && !cJSON_IsNull(rc)) {
            snprintf(msg, cap, "messages[%d].reasoning_content must be a string", i);
            return false;
        }
        if (calls && !cJSON_IsNull(calls)) {
            if (!assistant || !cJSON_IsArray(calls)) {
                snprintf(msg, cap, "messages[%d].tool_calls must be an array on an assistant message", i);
                return false;
            }
            const cJSON *c;
            cJSON_ArrayForEach(c, calls) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                if (!cJSON_IsObject(fn) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")) ||
                    (args && !cJSON_IsString(args) && !cJSON_IsObject(args))) {
                    snprintf(msg, cap, "messages[%d].tool_calls entries need function.name and function.arguments", i);
                    return false;
                }
            }
        }
        i++;
    }
    return true;
}

static bool valid_tools(const cJSON *tools, char *msg, size_t cap) {
    if (!tools || cJSON_IsNull(tools)) return true;
    if (!cJSON_IsArray(tools)) {
        snprintf(msg, cap, "'tools' must be an array");
        return false;
    }
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(fn) ||
            !cJSON_IsString(name) || !name->valuestring[0] || (params && !cJSON_IsObject(params)) ||
            (desc && !cJSON_IsString(desc))) {
            snprintf(msg, cap, "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}", i);
            return false;
        }
        i++;
    }
    return true;
}

/* tool_choice: "none" | "auto" | "required" | {"type":"function","function":{"name":N}} with N a tool. */
static bool valid_tool_choice(const cJSON *choice, const cJSON *tools, bool *none, char *msg, size_t cap) {
    *none = false;
    if (!choice || cJSON_IsNull(choice)) return true;
    if (cJSON_IsString(choice)) {
        if (!strcmp(choice->valuestring, "none")) *none = true;
        else if (strcmp(choice->valuestring, "auto") && strcmp(choice->valuestring, "required")) {
            snprintf(msg, cap, "'tool_choice' must be \"none\", \"auto\", \"required\" or a function object");
            return false;
        }
        return true;
    }
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *t;
    if (!cJSON_IsObject(choice) || !cJSON_IsString(name)) {
        snprintf(msg, cap, "'tool_choice' must be \"none\", \"auto\", \"required\" or a function object");
        return false;
    }
    cJSON_ArrayForEach(t, tools) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name->valuestring)) return true;
    }
    snprintf(msg, cap, "'tool_choice' names '%.60s', which is not in 'tools'", name->valuestring);
    return false;
}

/*
 * Reasoning strength: chat_template_kwargs.reasoning_strength wins, else reasoning_effort
 * (the alias vLLM and OpenAI clients send; "minimal"/"none" map to "low": the model always
 * reasons). *out = NULL when neither is given: the template's default (high), as in `muse chat`.
 */
static bool reasoning_strength(const cJSON *req, const char **out, char *msg, size_t cap, const char **param) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw)) {
        snprintf(msg, cap, "'chat_template_kwargs' must be an object");
        *param = "chat_template_kwargs";
        return false;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kw, "reasoning_strength");
    *param = "chat_template_kwargs.reasoning_strength";
    if (!v || cJSON_IsNull(v)) {
        v = cJSON_GetObjectItemCaseSensitive(kw, "reasoning_effort");
        *param = "chat_template_kwargs.reasoning_effort";
    }
    if (!v || cJSON_IsNull(v)) {
        v = cJSON_GetObjectItemCaseSensitive(req, "reasoning_effort");
        *param = "reasoning_effort";
    }
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return true;
    if (cJSON_IsString(v)) {
        if ((*out = muse_chat_reasoning_strength(v->valuestring))) return true;
        if (!strcmp(v->valuestring, "minimal") || !strcmp(v->valuestring, "none")) {
            *out = "low";
            return true;
        }
    }
    snprintf(msg, cap, "'%s' must be one of low, medium, high, xhigh", *param);
    return false;
}

/*
 * chat_template_kwargs as extra template variables (a new object, or NULL when there are none),
 * without the names the server itself sets (llama.cpp passes the rest to the template as is).
 */
static cJSON *template_kwargs(const cJSON *req) {
    static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt",
                                           "bos_token", "eos_token"};
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
    if (!cJSON_IsObject(kw) || !kw->child) return NULL;
    cJSON *out = cJSON_Duplicate(kw, true);
    for (size_t i = 0; out && i < sizeof reserved / sizeof reserved[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(out, reserved[i]);
    return out;
}

enum MHD_Result muse_srv_api_chat(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    struct muse_srv_job *job = muse_srv_job_new();
    char msg[300] = "", *prompt = NULL;
    cJSON *kwargs = NULL;
    const char *param = NULL;
    enum MHD_Result ret = MHD_YES;
    struct srv_gen_opts o = {.api = SRV_API_CHAT};
    if (!job) {
        ret = muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        goto out;
    }
    muse_srv_make_id(srv, job, "chatcmpl-", o.id, sizeof o.id);
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(req, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    bool no_tools = false;
    const char *strength = NULL;
    if (!valid_messages(messages, msg, sizeof msg)) param = "messages";
    else if (!valid_tools(tools, msg, sizeof msg)) param = "tools";
    else if (!valid_tool_choice(cJSON_GetObjectItemCaseSensitive(req, "tool_choice"), tools, &no_tools, msg, sizeof msg))
        param = "tool_choice";
    else if (!reasoning_strength(req, &strength, msg, sizeof msg, &param)) {
    } else if (!muse_srv_check_unsupported(req, true, msg, sizeof msg, &param)) {
    } else if (!muse_srv_parse_common(srv, req, job, true, msg, sizeof msg, &param)) {
    } else if (!muse_srv_parse_logprobs(req, true, &o, job, msg, sizeof msg, &param)) {
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(req, "stream_options");
    if (!msg[0] && so && !cJSON_IsNull(so) && !cJSON_IsObject(so)) {
        snprintf(msg, sizeof msg, "'stream_options' must be an object");
        param = "stream_options";
    }
    if (msg[0]) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", param, "%s", msg);
        goto out;
    }
    o.stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "stream"));
    o.include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
    const cJSON *use_tools = no_tools || !cJSON_IsArray(tools) || !cJSON_GetArraySize(tools) ? NULL : tools;
    kwargs = template_kwargs(req);
    struct muse_srv_chat_input in = {messages, use_tools, strength, kwargs};
    struct muse_error err = {0};
    if (srv->ad.ops->render_chat(srv->ad.self, &in, &prompt, &err) != MUSE_OK) {
        ret = err.status == MUSE_ERR_TEMPLATE || err.status == MUSE_ERR_INVALID_ARG || err.status == MUSE_ERR_FORMAT
                  ? muse_srv_reply_error(r, 400, "invalid_request_error", "messages", "chat template: %s", err.msg)
                  : muse_srv_reply_error(r, 500, "server_error", NULL, "chat template: %s", err.msg);
        goto out;
    }
    if (!muse_srv_tokenize_prompt(r, prompt, false, job)) goto out;
    job->parse_channels = true;
    job->no_tool_calls = no_tools;
    if (use_tools) job->tools = cJSON_Duplicate(use_tools, true);
    free(prompt);
    cJSON_Delete(kwargs);
    cJSON_Delete(req);
    return muse_srv_run_job(r, job, &o);
out:
    free(prompt);
    cJSON_Delete(kwargs);
    muse_srv_job_release(job);
    cJSON_Delete(req);
    return ret;
}

bool muse_srv_completion_prompt(struct srv_req *r, const cJSON *prompt, bool add_special, struct muse_srv_job *job) {
    struct muse_server *srv = r->srv;
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1 &&
        (cJSON_IsString(prompt->child) || cJSON_IsArray(prompt->child)))
        prompt = prompt->child;
    if (cJSON_IsString(prompt)) return muse_srv_tokenize_prompt(r, prompt->valuestring, add_special, job);
    if (!cJSON_IsArray(prompt) || cJSON_GetArraySize(prompt) == 0) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "prompt",
                             "'prompt' must be a string or a non-empty array of token ids");
        return false;
    }
    int n = cJSON_GetArraySize(prompt), i = 0;
    if (n >= srv->info.n_ctx) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "prompt",
                             "the prompt is %d tokens but the context of a slot is %d tokens", n, srv->info.n_ctx);
        return false;
    }
    job->prompt = malloc((size_t)n * sizeof *job->prompt);
    if (!job->prompt) {
        muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        return false;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, prompt) {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)t->valueint || t->valueint < 0 ||
            t->valueint >= srv->info.n_vocab) {
            muse_srv_reply_error(r, 400, "invalid_request_error", "prompt", "prompt[%d] is not a token id in [0, %d)", i,
                                 srv->info.n_vocab);
            return false;
        }
        job->prompt[i++] = t->valueint;
    }
    job->n_prompt = n;
    return true;
}

/* The prompt as echo shows it: the text as given, or the text of the token ids given (valid UTF-8,
 * malloc'd); NULL when out of memory. */
static char *prompt_text(struct muse_server *srv, const struct muse_srv_job *job, const cJSON *prompt) {
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1 && cJSON_IsString(prompt->child)) prompt = prompt->child;
    if (cJSON_IsString(prompt)) return strdup(prompt->valuestring);
    struct muse_srv_buf b = {0};
    char piece[256];
    for (int i = 0; i < job->n_prompt; i++) {
        int n = srv->ad.ops->token_piece(srv->ad.self, job->prompt[i], piece, sizeof piece);
        if (n > (int)sizeof piece) n = (int)sizeof piece;
        if (n > 0 && !muse_srv_buf_append(&b, piece, (size_t)n)) {
            muse_srv_buf_free(&b);
            return NULL;
        }
    }
    char *out = muse_srv_utf8_clean(muse_srv_buf_str(&b), b.len);
    muse_srv_buf_free(&b);
    return out;
}

enum MHD_Result muse_srv_api_completions(struct srv_req *r) {
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    enum MHD_Result ret = MHD_YES;
    struct srv_gen_opts o = {.api = SRV_API_COMPLETIONS};
    char msg[300] = "";
    const char *param = NULL;
    if (!muse_srv_check_unsupported(req, false, msg, sizeof msg, &param)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", param, "%s", msg);
        cJSON_Delete(req);
        return ret;
    }
    struct muse_srv_job *job = muse_srv_completion_job(r, req, true, &o, &ret);
    if (!job) goto out;
    if (!muse_srv_parse_logprobs(req, false, &o, job, msg, sizeof msg, &param)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", param, "%s", msg);
        goto out;
    }
    if (!cJSON_GetObjectItemCaseSensitive(req, "max_tokens") && !cJSON_GetObjectItemCaseSensitive(req, "max_completion_tokens"))
        job->n_predict = 16; /* the OpenAI default for completions */
    if (!muse_srv_completion_prompt(r, cJSON_GetObjectItemCaseSensitive(req, "prompt"), true, job)) goto out;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "echo")) && !(r->echo = prompt_text(r->srv, job, cJSON_GetObjectItemCaseSensitive(req, "prompt")))) {
        ret = muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        goto out;
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(req, "stream_options");
    o.stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "stream"));
    o.include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
    cJSON_Delete(req);
    return muse_srv_run_job(r, job, &o);
out:
    muse_srv_job_release(job);
    cJSON_Delete(req);
    return ret;
}


/* POST /apply-template: the chat request's messages (tools, reasoning, kwargs) rendered, not run. */
enum MHD_Result muse_srv_api_apply_template(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    char msg[300] = "", *prompt = NULL;
    const char *param = NULL, *strength = NULL;
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(req, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (!valid_messages(messages, msg, sizeof msg)) param = "messages";
    else if (!valid_tools(tools, msg, sizeof msg)) param = "tools";
    else if (!reasoning_strength(req, &strength, msg, sizeof msg, &param)) {
    }
    enum MHD_Result ret;
    if (msg[0]) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", param, "%s", msg);
        cJSON_Delete(req);
        return ret;
    }
    cJSON *kwargs = template_kwargs(req);
    struct muse_srv_chat_input in = {messages, cJSON_IsArray(tools) && cJSON_GetArraySize(tools) ? tools : NULL, strength, kwargs};
    struct muse_error err = {0};
    if (srv->ad.ops->render_chat(srv->ad.self, &in, &prompt, &err) != MUSE_OK) {
        ret = muse_srv_reply_error(r, err.status == MUSE_ERR_NOMEM ? 500 : 400,
                                   err.status == MUSE_ERR_NOMEM ? "server_error" : "invalid_request_error", "messages",
                                   "chat template: %s", err.msg);
    } else {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "prompt", prompt);
        ret = muse_srv_reply_json(r, 200, root);
    }
    free(prompt);
    cJSON_Delete(kwargs);
    cJSON_Delete(req);
    return ret;
}
