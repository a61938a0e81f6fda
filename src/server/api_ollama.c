/*
 * api_ollama.c - an Ollama-compatible API over the same slots: POST /api/chat and /api/generate
 * (NDJSON streaming by default, as Ollama), POST /api/show, GET /api/tags, /api/ps and
 * /api/version, so that tools written for Ollama (Open WebUI, editor plugins, the `ollama` Python
 * client) work unchanged. One model is served: any model name is accepted and answered with the
 * server's (--alias). Ollama's `options` map onto muse's sampling (docs/server.md, "Ollama API").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "server/server_int.h"

/* The Ollama release whose API this follows (its clients read it; none gate on it today). */
#define OLLAMA_API_VERSION "0.12.0"

/* now as RFC 3339 UTC with nanoseconds, as Ollama writes created_at */
static void iso_time(time_t t, char *buf, size_t cap) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%S.000000000Z", &tm);
}

static cJSON *base(struct muse_server *srv) {
    char now[64];
    iso_time(time(NULL), now, sizeof now);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", srv->info.model_name);
    cJSON_AddStringToObject(root, "created_at", now);
    return root;
}

/* ---- model description (/api/tags, /api/show, /api/ps) ---- */

/* details: format, family, parameter size and quantization, from the adapter's one-line
 * description "ARCH SIZE TYPE: ..." (empty with the scripted adapter). */
static cJSON *details(struct muse_server *srv) {
    char arch[64] = "muse-glimmer", size[32] = "", type[32] = "";
    if (srv->info.desc[0]) sscanf(srv->info.desc, "%63s %31s %31[^:]", arch, size, type);
    for (char *c = type; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", arch);
    cJSON *f = cJSON_AddArrayToObject(d, "families");
    cJSON_AddItemToArray(f, cJSON_CreateString(arch));
    cJSON_AddStringToObject(d, "parameter_size", size);
    cJSON_AddStringToObject(d, "quantization_level", type);
    return d;
}

/* The model entry of /api/tags and /api/ps. */
static cJSON *model_entry(struct muse_server *srv, bool running) {
    struct stat stt;
    bool have = srv->info.model_path[0] && !stat(srv->info.model_path, &stt);
    char when[64], digest[32];
    iso_time(have ? stt.st_mtime : (time_t)srv->created, when, sizeof when);
    /* not a content hash (that would read the whole file): size and time, stable while the file is */
    snprintf(digest, sizeof digest, "%016llx", (unsigned long long)(have ? (uint64_t)stt.st_size * 1000003u ^ (uint64_t)stt.st_mtime : 0));
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", srv->info.model_name);
    cJSON_AddStringToObject(m, "model", srv->info.model_name);
    if (!running) cJSON_AddStringToObject(m, "modified_at", when);
    cJSON_AddNumberToObject(m, "size", have ? (double)stt.st_size : 0);
    cJSON_AddStringToObject(m, "digest", digest);
    cJSON_AddItemToObject(m, "details", details(srv));
    if (running) {
        char never[64];
        iso_time((time_t)253402300799LL, never, sizeof never); /* 9999-12-31: never unloaded */
        cJSON_AddStringToObject(m, "expires_at", never);
        cJSON_AddNumberToObject(m, "size_vram", 0);
        cJSON_AddNumberToObject(m, "context_length", srv->info.n_ctx);
    }
    return m;
}

enum MHD_Result muse_srv_api_ollama_version(struct srv_req *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", OLLAMA_API_VERSION);
    return muse_srv_reply_json(r, 200, root);
}

enum MHD_Result muse_srv_api_ollama_tags(struct srv_req *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "models"), model_entry(r->srv, false));
    return muse_srv_reply_json(r, 200, root);
}

enum MHD_Result muse_srv_api_ollama_ps(struct srv_req *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "models"), model_entry(r->srv, true));
    return muse_srv_reply_json(r, 200, root);
}

enum MHD_Result muse_srv_api_ollama_show(struct srv_req *r) {
    struct muse_server *srv = r->srv;
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    cJSON_Delete(req);
    cJSON *root = cJSON_CreateObject();
    char modelfile[700], params[200], when[64];
    snprintf(modelfile, sizeof modelfile, "# served by muse %s\nFROM %s\n", muse_version(), srv->info.model_path);
    snprintf(params, sizeof params, "temperature %g\ntop_k %d\ntop_p %g\nmin_p %g\nnum_ctx %d", srv->p.temperature,
             srv->p.top_k, srv->p.top_p, srv->p.min_p, srv->info.n_ctx);
    iso_time((time_t)srv->created, when, sizeof when);
    cJSON_AddStringToObject(root, "modelfile", modelfile);
    cJSON_AddStringToObject(root, "parameters", params);
    cJSON_AddStringToObject(root, "template", srv->info.chat_template ? srv->info.chat_template : "");
    cJSON_AddItemToObject(root, "details", details(srv));
    cJSON *mi = cJSON_AddObjectToObject(root, "model_info");
    cJSON_AddStringToObject(mi, "general.architecture", "muse-glimmer");
    cJSON_AddStringToObject(mi, "general.basename", srv->info.model_name);
    cJSON_AddNumberToObject(mi, "muse-glimmer.context_length", srv->info.n_ctx_train);
    cJSON_AddNumberToObject(mi, "muse-glimmer.embedding_length", srv->info.n_embd);
    cJSON_AddNumberToObject(mi, "muse-glimmer.block_count", srv->info.n_layer);
    cJSON_AddNumberToObject(mi, "tokenizer.ggml.vocab_size", srv->info.n_vocab);
    cJSON *caps = cJSON_AddArrayToObject(root, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("tools"));
    cJSON_AddItemToArray(caps, cJSON_CreateString("thinking"));
    cJSON_AddStringToObject(root, "modified_at", when);
    return muse_srv_reply_json(r, 200, root);
}

/* ---- generation ---- */

/*
 * Ollama's options (and its top-level stop/format/think) as the OpenAI-named request object
 * muse_srv_parse_common reads; false with msg/param on a value muse cannot honour.
 */
static cJSON *openai_fields(const cJSON *req, char *msg, size_t cap, const char **param) {
    static const char *const same[] = {"temperature", "top_k", "top_p", "min_p", "seed", "presence_penalty",
                                       "frequency_penalty", "stop"};
    cJSON *o = cJSON_CreateObject();
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(req, "options"), *v;
    if (opts && !cJSON_IsNull(opts) && !cJSON_IsObject(opts)) {
        snprintf(msg, cap, "'options' must be an object");
        *param = "options";
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(opts, same[i]))) cJSON_AddItemToObject(o, same[i], cJSON_Duplicate(v, true));
    v = cJSON_GetObjectItemCaseSensitive(opts, "num_predict");
    if (cJSON_IsNumber(v) && v->valuedouble >= 0) cJSON_AddNumberToObject(o, "n_predict", v->valuedouble);
    else if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && (v->valuedouble == -1 || v->valuedouble == -2)))
        cJSON_AddItemToObject(o, "n_predict", cJSON_Duplicate(v, true)); /* parse_common names the bad value */
    const cJSON *mirostat = cJSON_GetObjectItemCaseSensitive(opts, "mirostat");
    if (cJSON_IsNumber(mirostat) && mirostat->valuedouble != 0) {
        snprintf(msg, cap, "options.mirostat is not supported by muse's sampler");
        *param = "options.mirostat";
        cJSON_Delete(o);
        return NULL;
    }
    /* format: "json" (any JSON object) or a JSON Schema: constrained decoding (docs/grammar.md) */
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(req, "format");
    if (cJSON_IsString(format) && !strcmp(format->valuestring, "json")) {
        cJSON *rf = cJSON_AddObjectToObject(o, "response_format");
        if (rf) cJSON_AddStringToObject(rf, "type", "json_object");
    } else if (cJSON_IsObject(format)) {
        cJSON_AddItemToObject(o, "json_schema", cJSON_Duplicate(format, true));
    } else if (format && !cJSON_IsNull(format) && !(cJSON_IsString(format) && !format->valuestring[0])) {
        snprintf(msg, cap, "'format' must be \"json\" or a JSON Schema object");
        *param = "format";
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* think: true/false or "low"/"medium"/"high" -> the reasoning strength (NULL: the template's). */
static bool think_strength(const cJSON *req, const char **out, char *msg, size_t cap, const char **param) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(req, "think");
    *out = NULL;
    if (!t || cJSON_IsNull(t) || cJSON_IsTrue(t)) return true;
    if (cJSON_IsFalse(t)) { /* the model always reasons: the least it can, and it is not returned */
        *out = "low";
        return true;
    }
    if (cJSON_IsString(t) && (!strcmp(t->valuestring, "low") || !strcmp(t->valuestring, "medium") ||
                              !strcmp(t->valuestring, "high"))) {
        *out = t->valuestring;
        return true;
    }
    snprintf(msg, cap, "'think' must be a boolean or one of low, medium, high");
    *param = "think";
    return false;
}

/* A job with the common fields of an Ollama generation parsed; NULL after a 400/500 reply. */
static struct muse_srv_job *new_job(struct srv_req *r, const cJSON *req, struct srv_gen_opts *o, const char **strength) {
    char msg[300] = "";
    const char *param = NULL;
    struct muse_srv_job *job = muse_srv_job_new();
    if (!job) {
        muse_srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    muse_srv_make_id(r->srv, job, "ollama-", o->id, sizeof o->id);
    cJSON *fields = openai_fields(req, msg, sizeof msg, &param);
    bool ok = fields && muse_srv_parse_common(r->srv, fields, job, false, msg, sizeof msg, &param) &&
              think_strength(req, strength, msg, sizeof msg, &param);
    if (ok) { /* the penalties Ollama names that OpenAI does not */
        const cJSON *opts = cJSON_GetObjectItemCaseSensitive(req, "options");
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(opts, "repeat_penalty");
        const cJSON *rn = cJSON_GetObjectItemCaseSensitive(opts, "repeat_last_n");
        if (rp && !(cJSON_IsNumber(rp) && rp->valuedouble > 0 && rp->valuedouble <= 100)) {
            snprintf(msg, sizeof msg, "options.repeat_penalty must be a number in (0, 100]");
            param = "options.repeat_penalty";
            ok = false;
        } else if (rn && !(cJSON_IsNumber(rn) && rn->valuedouble >= -1 && rn->valuedouble <= (1 << 20))) {
            snprintf(msg, sizeof msg, "options.repeat_last_n must be an integer in -1..%d", 1 << 20);
            param = "options.repeat_last_n";
            ok = false;
        } else {
            if (rp) job->sp.repeat_penalty = (float)rp->valuedouble;
            if (rn) job->sp.repeat_last_n = rn->valuedouble < 0 ? (int32_t)r->srv->info.n_ctx : (int32_t)rn->valuedouble;
        }
    }
    cJSON_Delete(fields);
    if (!ok) {
        muse_srv_reply_error(r, 400, "invalid_request_error", param, "%s", msg);
        muse_srv_job_release(job);
        return NULL;
    }
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(req, "stream");
    o->stream = !cJSON_IsFalse(stream); /* Ollama streams unless told not to */
    o->hide_thinking = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(req, "think"));
    return job;
}

/* An immediate done answer: an empty request loads the model in Ollama (done_reason "load"). */
static enum MHD_Result reply_load(struct srv_req *r, bool chat) {
    cJSON *root = base(r->srv);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(root, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", "");
    } else {
        cJSON_AddStringToObject(root, "response", "");
    }
    cJSON_AddBoolToObject(root, "done", true);
    cJSON_AddStringToObject(root, "done_reason", "load");
    return muse_srv_reply_json(r, 200, root);
}

/* Ollama messages as the OpenAI-shaped ones the adapter renders: thinking -> reasoning_content,
 * tool_name -> name; images -> image_url parts (data: URIs). NULL with msg set on a bad message. */
static cJSON *convert_messages(const cJSON *messages, char *msg, size_t cap) {
    cJSON *out = cJSON_CreateArray();
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *images = cJSON_GetObjectItemCaseSensitive(m, "images");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (content && !cJSON_IsString(content) && !cJSON_IsNull(content))) {
            snprintf(msg, cap, "messages[%d] must be an object with a string 'role' and a string 'content'", i);
            goto fail;
        }
        if (images && !cJSON_IsNull(images) && !cJSON_IsArray(images)) {
            snprintf(msg, cap, "messages[%d].images must be an array of base64 strings", i);
            goto fail;
        }
        static const char *const roles[] = {"system", "user", "assistant", "tool"};
        bool known = false;
        for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (!known) {
            snprintf(msg, cap, "messages[%d].role '%.40s' is not one of system, user, assistant, tool", i, role->valuestring);
            goto fail;
        }
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "role", role->valuestring);
        if (cJSON_IsArray(images) && cJSON_GetArraySize(images) > 0) {
            /* Ollama's base64 images: image_url parts (data: URIs; the decoder reads the format from
             * the bytes) before the text, as llama-mtmd-cli places them */
            cJSON *parts = cJSON_AddArrayToObject(c, "content"), *img;
            cJSON_ArrayForEach(img, images) {
                if (!cJSON_IsString(img)) {
                    cJSON_Delete(c);
                    snprintf(msg, cap, "messages[%d].images must be an array of base64 strings", i);
                    goto fail;
                }
                size_t n = strlen(img->valuestring) + 32;
                char *url = malloc(n);
                if (!url) {
                    cJSON_Delete(c);
                    snprintf(msg, cap, "out of memory");
                    goto fail;
                }
                snprintf(url, n, "data:image/*;base64,%s", img->valuestring);
                cJSON *part = cJSON_CreateObject();
                cJSON_AddStringToObject(part, "type", "image_url");
                cJSON_AddStringToObject(cJSON_AddObjectToObject(part, "image_url"), "url", url);
                free(url);
                cJSON_AddItemToArray(parts, part);
            }
            if (cJSON_IsString(content) && content->valuestring[0]) {
                cJSON *part = cJSON_CreateObject();
                cJSON_AddStringToObject(part, "type", "text");
                cJSON_AddStringToObject(part, "text", content->valuestring);
                cJSON_AddItemToArray(parts, part);
            }
        } else {
            cJSON_AddStringToObject(c, "content", cJSON_IsString(content) ? content->valuestring : "");
        }
        const cJSON *thinking = cJSON_GetObjectItemCaseSensitive(m, "thinking");
        if (cJSON_IsString(thinking) && thinking->valuestring[0])
            cJSON_AddStringToObject(c, "reasoning_content", thinking->valuestring);
        const cJSON *tool_name = cJSON_GetObjectItemCaseSensitive(m, "tool_name");
        if (cJSON_IsString(tool_name)) cJSON_AddStringToObject(c, "name", tool_name->valuestring);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call;
        if (cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) {
            cJSON *cc = cJSON_AddArrayToObject(c, "tool_calls");
            int k = 0;
            cJSON_ArrayForEach(call, calls) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                if (!cJSON_IsString(name) || (args && !cJSON_IsObject(args) && !cJSON_IsString(args))) {
                    cJSON_Delete(c);
                    snprintf(msg, cap, "messages[%d].tool_calls entries need function.name and function.arguments", i);
                    goto fail;
                }
                cJSON *e = cJSON_CreateObject();
                char id[32];
                snprintf(id, sizeof id, "call_%d_%d", i, k++);
                cJSON_AddStringToObject(e, "id", id);
                cJSON_AddStringToObject(e, "type", "function");
                cJSON *f = cJSON_AddObjectToObject(e, "function");
                cJSON_AddStringToObject(f, "name", name->valuestring);
                cJSON_AddItemToObject(f, "arguments", args ? cJSON_Duplicate(args, true) : cJSON_CreateObject());
                cJSON_AddItemToArray(cc, e);
            }
        }
        cJSON_AddItemToArray(out, c);
        i++;
    }
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

/* tools: OpenAI's shape (Ollama uses it): an array of {"type": "function", "function": {"name"}}. */
static bool valid_tools(const cJSON *tools, char *msg, size_t cap) {
    if (!tools || cJSON_IsNull(tools)) return true;
    const cJSON *t;
    bool ok = cJSON_IsArray(tools);
    cJSON_ArrayForEach(t, tools) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        ok &= cJSON_IsString(name) && name->valuestring[0];
    }
    if (!ok) snprintf(msg, cap, "'tools' must be an array of {\"type\": \"function\", \"function\": {\"name\": ...}}");
    return ok;
}

/* Render messages and run the job (its reference moves); replies itself. */
static enum MHD_Result render_and_run(struct srv_req *r, struct muse_srv_job *job, struct srv_gen_opts *o,
                                      const cJSON *messages, const cJSON *tools, const char *strength) {
    struct muse_srv_chat_input in = {messages, tools, strength, NULL};
    if (!muse_srv_chat_prompt(r, &in, job)) {
        muse_srv_job_release(job);
        return MHD_YES;
    }
    job->parse_channels = true;
    job->grammar_lazy = true; /* format: the answer is constrained (the whole of it unless the prompt holds the header) */
    char msg[256];
    if (!muse_srv_chat_whole_grammar(r->srv, job, msg, sizeof msg)) {
        muse_srv_reply_error(r, 400, "invalid_request_error", "format", "%s", msg);
        muse_srv_job_release(job);
        return MHD_YES;
    }
    if (tools) job->tools = cJSON_Duplicate(tools, true);
    return muse_srv_run_job(r, job, o);
}

enum MHD_Result muse_srv_api_ollama_chat(struct srv_req *r) {
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    enum MHD_Result ret = MHD_YES;
    struct srv_gen_opts o = {.dialect = &muse_srv_dialect_ollama_chat};
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(req, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    char msg[300] = "";
    const char *strength = NULL;
    if (messages && !cJSON_IsNull(messages) && !cJSON_IsArray(messages)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "messages", "'messages' must be an array");
    } else if (!cJSON_GetArraySize(messages)) {
        ret = reply_load(r, true);
    } else if (!valid_tools(tools, msg, sizeof msg)) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "tools", "%s", msg);
    } else {
        cJSON *conv = convert_messages(messages, msg, sizeof msg);
        struct muse_srv_job *job = conv ? new_job(r, req, &o, &strength) : NULL;
        if (!conv) ret = muse_srv_reply_error(r, 400, "invalid_request_error", "messages", "%s", msg);
        else if (job)
            ret = render_and_run(r, job, &o, conv, cJSON_IsArray(tools) && cJSON_GetArraySize(tools) ? tools : NULL, strength);
        cJSON_Delete(conv);
    }
    cJSON_Delete(req);
    return ret;
}

enum MHD_Result muse_srv_api_ollama_generate(struct srv_req *r) {
    cJSON *req = muse_srv_parse_body(r);
    if (!req) return MHD_YES;
    enum MHD_Result ret = MHD_YES;
    struct srv_gen_opts o = {.dialect = &muse_srv_dialect_ollama_generate};
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(req, "system");
    const cJSON *images = cJSON_GetObjectItemCaseSensitive(req, "images");
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(req, "suffix");
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(req, "template");
    const cJSON *context = cJSON_GetObjectItemCaseSensitive(req, "context");
    const char *strength = NULL;
    if ((prompt && !cJSON_IsString(prompt) && !cJSON_IsNull(prompt)) || (system && !cJSON_IsString(system) && !cJSON_IsNull(system))) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "prompt", "'prompt' and 'system' must be strings");
    } else if (cJSON_IsArray(images) && cJSON_GetArraySize(images) > 0) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "images", "images are not supported by this model");
    } else if (cJSON_IsString(suffix) && suffix->valuestring[0]) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "suffix", "'suffix' (fill in the middle) is not supported by muse");
    } else if (cJSON_IsString(tmpl) && tmpl->valuestring[0]) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "template",
                                   "'template' (a Go template) is not supported: muse renders the model's Jinja chat "
                                   "template (or use raw: true)");
    } else if (cJSON_IsArray(context) && cJSON_GetArraySize(context) > 0) {
        ret = muse_srv_reply_error(r, 400, "invalid_request_error", "context",
                                   "'context' (deprecated in Ollama) is not supported: send the conversation to /api/chat");
    } else if (!cJSON_IsString(prompt) || !prompt->valuestring[0]) {
        ret = reply_load(r, false);
    } else {
        struct muse_srv_job *job = new_job(r, req, &o, &strength);
        if (job && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "raw"))) {
            /* raw: the prompt as it is (with BOS), no template; the output is plain text */
            if (muse_srv_tokenize_prompt(r, prompt->valuestring, true, job)) ret = muse_srv_run_job(r, job, &o);
            else muse_srv_job_release(job);
        } else if (job) {
            cJSON *msgs = cJSON_CreateArray();
            if (cJSON_IsString(system) && system->valuestring[0]) {
                cJSON *s = cJSON_CreateObject();
                cJSON_AddStringToObject(s, "role", "system");
                cJSON_AddStringToObject(s, "content", system->valuestring);
                cJSON_AddItemToArray(msgs, s);
            }
            cJSON *u = cJSON_CreateObject();
            cJSON_AddStringToObject(u, "role", "user");
            cJSON_AddStringToObject(u, "content", prompt->valuestring);
            cJSON_AddItemToArray(msgs, u);
            ret = render_and_run(r, job, &o, msgs, NULL, strength);
            cJSON_Delete(msgs);
        }
    }
    cJSON_Delete(req);
    return ret;
}

/* ---- replies (the Ollama dialects; api_common.c calls them, job->mu held) ---- */

static void add_stats(cJSON *root, const struct muse_srv_job *job) {
    cJSON_AddStringToObject(root, "done_reason", job->finish == MUSE_SRV_FINISH_LENGTH ? "length" : "stop");
    double total = (double)(job->t_end_us - job->t_submit_us) * 1000.0;
    double pre = (double)(job->t_prefill_end_us - job->t_start_us) * 1000.0;
    double dec = (double)(job->t_end_us - job->t_prefill_end_us) * 1000.0;
    cJSON_AddNumberToObject(root, "total_duration", total > 0 ? floor(total) : 0);
    cJSON_AddNumberToObject(root, "load_duration", 0);
    cJSON_AddNumberToObject(root, "prompt_eval_count", job->n_prompt - job->n_cached);
    cJSON_AddNumberToObject(root, "prompt_eval_duration", pre > 0 ? floor(pre) : 0);
    cJSON_AddNumberToObject(root, "eval_count", job->n_out);
    cJSON_AddNumberToObject(root, "eval_duration", dec > 0 ? floor(dec) : 0);
}

/* A chunk (or the whole answer) with content / thinking / tool calls [c0, c1) from the given offsets. */
static cJSON *piece(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o, size_t content_from,
                    size_t reasoning_from, int calls_from) {
    cJSON *root = base(srv);
    const char *content = job->content.p ? job->content.p + content_from : "";
    const char *thinking = !o->hide_thinking && job->reasoning.len > reasoning_from ? job->reasoning.p + reasoning_from : NULL;
    if (o->dialect->chat) {
        cJSON *m = cJSON_AddObjectToObject(root, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", content);
        if (thinking) cJSON_AddStringToObject(m, "thinking", thinking);
        if (job->n_calls > calls_from) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            for (int i = calls_from; i < job->n_calls; i++) {
                cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
                cJSON_AddStringToObject(f, "name", job->calls[i].name);
                cJSON *args = cJSON_Parse(job->calls[i].arguments);
                cJSON_AddItemToObject(f, "arguments", cJSON_IsObject(args) ? args : cJSON_CreateObject());
                if (!cJSON_IsObject(args)) cJSON_Delete(args);
                cJSON_AddItemToArray(calls, c);
            }
        }
    } else {
        cJSON_AddStringToObject(root, "response", content);
        if (thinking) cJSON_AddStringToObject(root, "thinking", thinking);
    }
    return root;
}

/* The whole answer, done: true with the statistics. */
static char *ollama_reply(struct muse_server *srv, const struct muse_srv_job *job, const struct srv_gen_opts *o,
                          const char *echo) {
    (void)echo;
    cJSON *root = piece(srv, job, o, 0, 0, 0);
    cJSON_AddBoolToObject(root, "done", true);
    add_stats(root, job);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

static void line(struct muse_srv_buf *out, cJSON *obj) {
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!text) return;
    muse_srv_buf_puts(out, text);
    muse_srv_buf_puts(out, "\n");
    free(text);
}

/* NDJSON lines of what is new past the cursors, then the last one (done, or an error). */
static void ollama_collect(struct srv_stream *st) {
    const struct muse_srv_job *job = st->job;
    const struct srv_gen_opts *o = &st->o;
    struct muse_srv_buf *out = &st->out;
    if (job->content.len > st->sent_content || (!o->hide_thinking && job->reasoning.len > st->sent_reasoning) ||
        job->n_calls > st->sent_calls) {
        cJSON *root = piece(st->srv, job, o, st->sent_content, st->sent_reasoning, st->sent_calls);
        cJSON_AddBoolToObject(root, "done", false);
        line(out, root);
        st->sent_content = job->content.len;
        st->sent_reasoning = job->reasoning.len;
        st->sent_calls = job->n_calls;
    }
    st->sent_reasoning = job->reasoning.len;
    if (!job->done) return;
    st->finished = true;
    if (job->finish == MUSE_SRV_FINISH_ERROR || job->finish == MUSE_SRV_FINISH_CANCELLED) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "error", job->finish == MUSE_SRV_FINISH_CANCELLED ? "generation cancelled (server shutting down)"
                                                                                      : job->err);
        line(out, e);
        return;
    }
    cJSON *root = piece(st->srv, job, o, job->content.len, job->reasoning.len, job->n_calls);
    cJSON_AddBoolToObject(root, "done", true);
    add_stats(root, job);
    line(out, root);
}

const struct srv_dialect muse_srv_dialect_ollama_chat = {
    .chat = true,
    .stream_type = "application/x-ndjson",
    .reply = ollama_reply,
    .collect = ollama_collect,
};

const struct srv_dialect muse_srv_dialect_ollama_generate = {
    .stream_type = "application/x-ndjson",
    .reply = ollama_reply,
    .collect = ollama_collect,
};
