/* api_openai.c - POST /v1/chat/completions and POST /v1/completions (OpenAI shapes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/tool_grammar.h"
#include "text/chat.h"
#include "server/server_int.h"

static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

/* Check a message's content: a string, null, or an array of text and image_url parts (the image
 * itself is checked by muse_srv_chat_prompt, api_chat.c). */
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
        if (!strcmp(type->valuestring, "image_url")) continue;
        if (strcmp(type->valuestring, "text")) {
            snprintf(msg, cap, "messages[%d]: content part type '%.40s' is not supported (text and image_url only)", i,
                     type->valuestring);
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

/*
 * tool_choice "required" or a named function: the answer is constrained to a tool call in the
 * ATEM form with arguments under the function's parameter schema (gen/tool_grammar.h), armed
 * from the first generated token. The scripted test adapter cannot constrain: there the choice
 * stays advisory. False after replying 400 (a schema the grammar cannot enforce) or 500.
 */
static bool force_tool_call(struct srv_req *r, const cJSON *choice, const cJSON *tools, struct muse_srv_job *job,
                            enum MHD_Result *ret) {
    struct muse_server *srv = r->srv;
    const char *name = NULL;
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")) {
    } else if (cJSON_IsObject(choice)) {
        name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "function"), "name")->valuestring;
    } else {
        return true;
    }
    if (!srv->ad.ops->slot_constrain || !srv->ad.ops->grammar_compile) return true;
    char *gbnf = NULL;
    struct muse_error err = {0};
    muse_status st = muse_tool_call_grammar(tools, name, &gbnf, &err);
    if (st == MUSE_OK) st = srv->ad.ops->grammar_compile(srv->ad.self, MUSE_GRAMMAR_GBNF, gbnf, strlen(gbnf), &job->grammar, &err);
    free(gbnf);
    if (st == MUSE_OK) return true;
    *ret = st == MUSE_ERR_NOMEM ? muse_srv_reply_error(r, 500, "server_error", NULL, "%s", err.msg)
                                : muse_srv_reply_error(r, 400, "invalid_request_error", "tools", "tool_choice: %s", err.msg);
    return false;
}

enum MHD_Result muse_srv_api_chat(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    struct muse_srv_job *job = muse_srv_job_new();
    char msg[400] = "";
    cJSON *kwargs = NULL;
    const char *param = NULL;
    enum MHD_Result ret = MHD_YES;
    struct srv_gen_opts o = {.dialect = &muse_srv_dialect_chat};
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
    if (!muse_srv_chat_prompt(r, &in, job)) goto out;
    bool tool_forced = false;
    if (use_tools) {
        const cJSON *choice = cJSON_GetObjectItemCaseSensitive(req, "tool_choice");
        if (job->grammar && (cJSON_IsObject(choice) || (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")))) {
            ret = muse_srv_reply_error(r, 400, "invalid_request_error", "tool_choice",
                                       "a forced tool call and response_format / grammar exclude each other");
            goto out;
        }
        if (!job->grammar) {
            if (!force_tool_call(r, choice, use_tools, job, &ret)) goto out;
            tool_forced = job->grammar != NULL;
        }
    }
    job->parse_channels = true;
    /* response_format: the answer is constrained (the whole of it unless the prompt holds the header);
     * a forced tool call: all of it */
    job->grammar_lazy = !tool_forced;
    if (job->grammar_lazy && !muse_srv_chat_whole_grammar(r->srv, job, msg, sizeof msg)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "response_format", "%s", msg);
        goto out;
    }
    job->no_tool_calls = no_tools;
    if (use_tools) job->tools = cJSON_Duplicate(use_tools, true);
    cJSON_Delete(kwargs);
    cJSON_Delete(req);
    return muse_srv_run_job(r, job, &o);
out:
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
    struct srv_gen_opts o = {.dialect = &muse_srv_dialect_completions};
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

/* ---- replies (the OpenAI dialects; api_common.c calls them, job->mu held) ---- */

static const char *chat_finish(const struct muse_srv_job *job) {
    switch (job->finish) {
    case MUSE_SRV_FINISH_LENGTH: return "length";
    default: return job->n_calls > 0 ? "tool_calls" : "stop";
    }
}

static cJSON *usage_json(const struct muse_srv_job *job) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", job->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", job->n_out);
    cJSON_AddNumberToObject(u, "total_tokens", job->n_prompt + job->n_out);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", job->n_cached);
    return u;
}

static cJSON *tool_call_json(const struct muse_srv_tool_call *c, int index, bool with_index) {
    cJSON *o = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(fn, "name", c->name);
    cJSON_AddStringToObject(fn, "arguments", c->arguments);
    return o;
}

static cJSON *openai_base(struct muse_server *srv, const struct srv_gen_opts *o, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", o->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)time(NULL));
    cJSON_AddStringToObject(root, "model", srv->info.model_name);
    char fp[64];
    snprintf(fp, sizeof fp, "muse-%s", muse_version());
    cJSON_AddStringToObject(root, "system_fingerprint", fp);
    return root;
}

/* The whole answer of a finished job as one JSON document; echo: the prompt text put before a
 * completion's text (NULL: none). */
static char *openai_reply(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o,
                          const char *echo) {
    bool chat = o->dialect->chat;
    cJSON *root = openai_base(srv, o, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (job->n_calls > 0 && !job->content.len) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", muse_srv_buf_str(&job->content));
        if (job->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", muse_srv_buf_str(&job->reasoning));
        if (job->n_calls > 0) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            for (int i = 0; i < job->n_calls; i++) cJSON_AddItemToArray(calls, tool_call_json(&job->calls[i], i, false));
        }
        cJSON_AddStringToObject(c, "finish_reason", chat_finish(job));
    } else if (echo) {
        size_t ne = strlen(echo);
        char *text = malloc(ne + job->content.len + 1);
        if (text) {
            memcpy(text, echo, ne);
            memcpy(text + ne, muse_srv_buf_str(&job->content), job->content.len + 1);
        }
        cJSON_AddStringToObject(c, "text", text ? text : "");
        free(text);
        cJSON_AddStringToObject(c, "finish_reason", job->finish == MUSE_SRV_FINISH_LENGTH ? "length" : "stop");
    } else {
        cJSON_AddStringToObject(c, "text", muse_srv_buf_str(&job->content));
        cJSON_AddStringToObject(c, "finish_reason", job->finish == MUSE_SRV_FINISH_LENGTH ? "length" : "stop");
    }
    if (!o->logprobs) cJSON_AddNullToObject(c, "logprobs");
    else if (chat)
        cJSON_AddItemToObject(c, "logprobs", muse_srv_chat_logprobs(srv, job, 0, muse_srv_logprobs_end(srv, job), o->top_logprobs));
    else
        cJSON_AddItemToObject(c, "logprobs", muse_srv_completion_logprobs(srv, job, 0, muse_srv_logprobs_end(srv, job),
                                                                         o->top_logprobs, echo ? strlen(echo) : 0));
    cJSON_AddItemToObject(root, "usage", usage_json(job));
    cJSON_AddItemToObject(root, "timings", muse_srv_timings_json(job));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* A chat/completions chunk with one choice; returns the root and the delta (chat) or the choice. */
static cJSON *chunk(struct srv_stream *st, cJSON **slot) {
    bool chat = st->o.dialect->chat;
    cJSON *root = openai_base(st->srv, &st->o, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    *slot = chat ? cJSON_AddObjectToObject(c, "delta") : c;
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    return root;
}

static void set_finish(cJSON *root, const char *reason) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "finish_reason", cJSON_CreateString(reason));
}

/* Put the log probabilities of the tokens not yet reported (up to lp_end) on root's choice. */
static void attach_logprobs(struct srv_stream *st, cJSON *root, int lp_end) {
    if (!st->o.logprobs || lp_end <= st->sent_lp) return;
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    cJSON *lp = st->o.dialect->chat ? muse_srv_chat_logprobs(st->srv, st->job, st->sent_lp, lp_end, st->o.top_logprobs)
                                    : muse_srv_completion_logprobs(st->srv, st->job, st->sent_lp, lp_end, st->o.top_logprobs,
                                                                   st->r->echo ? strlen(st->r->echo) : 0);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", lp);
    st->sent_lp = lp_end;
}

/* Format what is new in the job as chat.completion.chunk / text_completion events. */
static void openai_collect(struct srv_stream *st) {
    struct muse_srv_job *job = st->job;
    struct muse_server *srv = st->srv;
    bool chat = st->o.dialect->chat;
    int lp_end = st->o.logprobs ? muse_srv_logprobs_end(srv, job) : 0;
    cJSON *slot;
    if (!chat && st->r->echo && !st->sent_echo) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, "text", st->r->echo);
        muse_srv_sse(st, root);
        st->sent_echo = true;
    }
    if (chat && !st->sent_role) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, "role", "assistant");
        cJSON_AddStringToObject(slot, "content", "");
        muse_srv_sse(st, root);
        st->sent_role = true;
    }
    if (chat && job->reasoning.len > st->sent_reasoning) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, "reasoning_content", job->reasoning.p + st->sent_reasoning);
        st->sent_reasoning = job->reasoning.len;
        attach_logprobs(st, root, lp_end);
        muse_srv_sse(st, root);
    }
    if (job->content.len > st->sent_content) {
        cJSON *root = chunk(st, &slot);
        cJSON_AddStringToObject(slot, chat ? "content" : "text", job->content.p + st->sent_content);
        st->sent_content = job->content.len;
        attach_logprobs(st, root, lp_end);
        muse_srv_sse(st, root);
    }
    while (chat && st->sent_calls < job->n_calls) {
        cJSON *root = chunk(st, &slot);
        cJSON *arr = cJSON_AddArrayToObject(slot, "tool_calls");
        cJSON_AddItemToArray(arr, tool_call_json(&job->calls[st->sent_calls], st->sent_calls, true));
        st->sent_calls++;
        attach_logprobs(st, root, lp_end);
        muse_srv_sse(st, root);
    }
    if (st->o.logprobs && lp_end > st->sent_lp) { /* tokens whose text is held back (or no text): their own chunk */
        cJSON *root = chunk(st, &slot);
        if (!chat) cJSON_AddStringToObject(slot, "text", "");
        attach_logprobs(st, root, lp_end);
        muse_srv_sse(st, root);
    }
    if (!job->done) return;
    if (job->finish == MUSE_SRV_FINISH_ERROR) goto error;
    /*
     * The last chunk carries finish_reason. A generation cut short by shutdown (the only
     * cancellation a client still sees) ends the same way, with finish_reason "error", so that
     * OpenAI clients end the stream normally instead of failing on its last event.
     */
    cJSON *root = chunk(st, &slot);
    if (!chat) cJSON_AddStringToObject(slot, "text", "");
    set_finish(root, job->finish == MUSE_SRV_FINISH_CANCELLED ? "error"
                     : chat                                    ? chat_finish(job)
                     : job->finish == MUSE_SRV_FINISH_LENGTH   ? "length"
                                                               : "stop");
    cJSON_AddItemToObject(root, "usage", usage_json(job));
    cJSON_AddItemToObject(root, "timings", muse_srv_timings_json(job));
    muse_srv_sse(st, root);
    if (st->o.include_usage) {
        root = openai_base(srv, &st->o, chat ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_json(job));
        muse_srv_sse(st, root);
    }
    muse_srv_buf_puts(&st->out, "data: [DONE]\n\n");
    st->finished = true;
    return;
error:
    muse_srv_sse_error(st);
    muse_srv_buf_puts(&st->out, "data: [DONE]\n\n");
    st->finished = true;
}

/* A chat stream opens with the assistant's role, before any text. */
static bool chat_news(const struct srv_stream *st) { return !st->sent_role; }

const struct srv_dialect muse_srv_dialect_chat = {
    .chat = true,
    .stream_type = "text/event-stream; charset=utf-8",
    .reply = openai_reply,
    .collect = openai_collect,
    .more_news = chat_news,
};

const struct srv_dialect muse_srv_dialect_completions = {
    .stream_type = "text/event-stream; charset=utf-8",
    .reply = openai_reply,
    .collect = openai_collect,
};
