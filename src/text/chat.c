/*
 * chat.c - conversation state and rendering for the Muse-Glimmer format (see chat.h).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "text/glimmer_template.h"
#include "core/error.h"
#include "text/chat.h"
#include "text/output_parser.h"

struct muse_chat {
    struct muse_jinja_template *tmpl;
    cJSON *messages; /* array */
};

muse_status muse_chat_builtin_template(struct muse_jinja_template **out, struct muse_error *err) {
    return muse_jinja_parse(muse_glimmer_chat_template, muse_glimmer_chat_template_len, out, err);
}

cJSON *muse_chat_context_from_conversation(const cJSON *conv, const char *bos, const char *eos,
                                           struct muse_error *err) {
    if (!cJSON_IsObject(conv)) {
        muse_error_set(err, MUSE_ERR_FORMAT, "conversation is not a JSON object");
        return NULL;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(conv, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(conv, "tools");
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(conv, "add_generation_prompt");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(conv, "extra");
    if (!cJSON_IsArray(msgs)) {
        muse_error_set(err, MUSE_ERR_FORMAT, "conversation has no \"messages\" array");
        return NULL;
    }
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) goto fail;
    cJSON *m = cJSON_Duplicate(msgs, 1);
    cJSON *t = tools ? cJSON_Duplicate(tools, 1) : cJSON_CreateNull();
    if (!m || !t) {
        cJSON_Delete(m);
        cJSON_Delete(t);
        goto fail;
    }
    cJSON_AddItemToObject(ctx, "messages", m);
    cJSON_AddItemToObject(ctx, "tools", t);
    if (!cJSON_AddNullToObject(ctx, "documents") ||
        !cJSON_AddBoolToObject(ctx, "add_generation_prompt", cJSON_IsTrue(agp)) ||
        !cJSON_AddStringToObject(ctx, "bos_token", bos ? bos : "") ||
        !cJSON_AddStringToObject(ctx, "eos_token", eos ? eos : ""))
        goto fail;
    if (cJSON_IsObject(extra)) {
        for (const cJSON *e = extra->child; e; e = e->next) {
            cJSON *v = cJSON_Duplicate(e, 1);
            if (!v) goto fail;
            cJSON_DeleteItemFromObjectCaseSensitive(ctx, e->string);
            cJSON_AddItemToObject(ctx, e->string, v);
        }
    }
    return ctx;
fail:
    cJSON_Delete(ctx);
    muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    return NULL;
}

const char *muse_chat_reasoning_strength(const char *s) {
    static const char *const names[] = {"low", "medium", "high", "xhigh"};
    if (!s) return NULL;
    for (size_t i = 0; i < 4; i++)
        if (!strcasecmp(s, names[i])) return names[i];
    return NULL;
}

muse_status muse_chat_create(const char *template_text, size_t len, struct muse_chat **out,
                             struct muse_error *err) {
    *out = NULL;
    struct muse_chat *c = calloc(1, sizeof(*c));
    if (!c) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    muse_status st = template_text ? muse_jinja_parse(template_text, len, &c->tmpl, err)
                                   : muse_chat_builtin_template(&c->tmpl, err);
    if (st != MUSE_OK) goto fail;
    c->messages = cJSON_CreateArray();
    if (!c->messages) {
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    *out = c;
    return MUSE_OK;
fail:
    muse_chat_free(c);
    return st;
}

void muse_chat_free(struct muse_chat *chat) {
    if (!chat) return;
    muse_jinja_free(chat->tmpl);
    cJSON_Delete(chat->messages);
    free(chat);
}

void muse_chat_reset(struct muse_chat *chat) {
    while (cJSON_GetArraySize(chat->messages) > 0) cJSON_DeleteItemFromArray(chat->messages, 0);
}

size_t muse_chat_n_messages(const struct muse_chat *chat) {
    return (size_t)cJSON_GetArraySize(chat->messages);
}

const cJSON *muse_chat_messages(const struct muse_chat *chat) { return chat->messages; }

muse_status muse_chat_add(struct muse_chat *chat, const char *role, const char *content,
                          struct muse_error *err) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content ? content : "")) {
        cJSON_Delete(m);
        return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    cJSON_AddItemToArray(chat->messages, m);
    return MUSE_OK;
}

muse_status muse_chat_add_json(struct muse_chat *chat, const cJSON *message, struct muse_error *err) {
    if (!cJSON_IsObject(message) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(message, "role")))
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "a message must be an object with a string \"role\"");
    cJSON *m = cJSON_Duplicate(message, 1);
    if (!m) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    cJSON_AddItemToArray(chat->messages, m);
    return MUSE_OK;
}

muse_status muse_chat_add_parsed(struct muse_chat *chat, const struct muse_output_parser *p,
                                 struct muse_error *err) {
    size_t rl, cl;
    const char *r = muse_output_parser_reasoning(p, &rl), *c = muse_output_parser_content(p, &cl);
    const cJSON *calls = muse_output_parser_tool_calls(p);
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", "assistant")) goto nomem;
    int n_calls = cJSON_GetArraySize(calls);
    if (cl == 0 && n_calls > 0) {
        if (!cJSON_AddNullToObject(m, "content")) goto nomem;
    } else {
        char *cs = strndup(c, cl);
        cJSON *cv = cs ? cJSON_CreateString(cs) : NULL;
        free(cs);
        if (!cv) goto nomem;
        cJSON_AddItemToObject(m, "content", cv);
    }
    if (rl > 0) {
        char *rs = strndup(r, rl);
        cJSON *rv = rs ? cJSON_CreateString(rs) : NULL;
        free(rs);
        if (!rv) goto nomem;
        cJSON_AddItemToObject(m, "reasoning_content", rv);
    }
    if (n_calls > 0) {
        cJSON *tc = cJSON_Duplicate(calls, 1);
        if (!tc) goto nomem;
        cJSON_AddItemToObject(m, "tool_calls", tc);
        /* arguments as objects: the template refuses JSON strings */
        for (cJSON *call = tc->child; call; call = call->next) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(args)) continue;
            cJSON *obj = cJSON_Parse(args->valuestring);
            if (!obj) goto nomem;
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
        }
    }
    cJSON_AddItemToArray(chat->messages, m);
    return MUSE_OK;
nomem:
    cJSON_Delete(m);
    return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
}

static bool has_system(const cJSON *msgs) {
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (cJSON_IsString(r) && !strcmp(r->valuestring, "system")) return true;
    }
    return false;
}

static bool set_item(cJSON *obj, const char *key, cJSON *val) {
    if (!val) return false;
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, val);
    return true;
}

muse_status muse_chat_render(const struct muse_chat *chat, const struct muse_chat_options *opts,
                             bool add_generation_prompt, char **out, size_t *out_len,
                             struct muse_error *err) {
    static const struct muse_chat_options none;
    if (!opts) opts = &none;
    *out = NULL;
    muse_status st = MUSE_ERR_NOMEM;
    cJSON *ctx = cJSON_CreateObject();
    cJSON *msgs = cJSON_Duplicate(chat->messages, 1);
    if (!ctx || !msgs) goto nomem;
    if (opts->system_prompt && !has_system(msgs)) {
        cJSON *sys = cJSON_CreateObject();
        if (!sys || !cJSON_AddStringToObject(sys, "role", "system") ||
            !cJSON_AddStringToObject(sys, "content", opts->system_prompt)) {
            cJSON_Delete(sys);
            goto nomem;
        }
        cJSON_InsertItemInArray(msgs, 0, sys);
    }
    cJSON_AddItemToObject(ctx, "messages", msgs);
    msgs = NULL;
    if (!set_item(ctx, "tools", opts->tools ? cJSON_Duplicate(opts->tools, 1) : cJSON_CreateNull()) ||
        !set_item(ctx, "documents", cJSON_CreateNull()) ||
        !set_item(ctx, "add_generation_prompt", cJSON_CreateBool(add_generation_prompt)) ||
        !set_item(ctx, "bos_token", cJSON_CreateString(opts->bos_token ? opts->bos_token : MUSE_CHAT_DEFAULT_BOS)) ||
        !set_item(ctx, "eos_token", cJSON_CreateString(opts->eos_token ? opts->eos_token : MUSE_CHAT_DEFAULT_EOS)))
        goto nomem;
    if (cJSON_IsObject(opts->extra)) {
        for (const cJSON *e = opts->extra->child; e; e = e->next)
            if (e->string && !set_item(ctx, e->string, cJSON_Duplicate(e, 1))) goto nomem;
    }
    /* reasoning_effort is an alias of reasoning_strength (the name the model was trained on) */
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(ctx, "reasoning_effort");
    if (cJSON_IsString(effort) && !cJSON_GetObjectItemCaseSensitive(ctx, "reasoning_strength")) {
        const char *canon = muse_chat_reasoning_strength(effort->valuestring);
        if (!canon) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                "reasoning_effort must be low, medium, high or xhigh, not '%s'", effort->valuestring);
            goto fail;
        }
        if (!set_item(ctx, "reasoning_strength", cJSON_CreateString(canon))) goto nomem;
    }
    if (opts->reasoning) {
        const char *canon = muse_chat_reasoning_strength(opts->reasoning);
        if (!canon) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG,
                                "reasoning strength must be low, medium, high or xhigh, not '%s'", opts->reasoning);
            goto fail;
        }
        if (!set_item(ctx, "reasoning_strength", cJSON_CreateString(canon))) goto nomem;
    }
    st = muse_jinja_render(chat->tmpl, ctx, &opts->jinja, out, out_len, err);
    cJSON_Delete(ctx);
    return st;
nomem:
    st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
fail:
    cJSON_Delete(msgs);
    cJSON_Delete(ctx);
    return st;
}

size_t muse_chat_common_prefix(const char *a, size_t a_len, const char *b, size_t b_len) {
    size_t n = a_len < b_len ? a_len : b_len, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}
