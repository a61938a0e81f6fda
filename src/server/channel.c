/* channel.c - the Muse-Glimmer channel / ATEM output parser used by the server. */
#include "server/channel.h"

#include <cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"

#define MARK_MESSAGE "<|message|>"
#define MARK_EOM "<|eom|>"
#define MARK_EOT "<|eot|>"
#define MARK_START_ASSISTANT "<|start|>assistant"
#define MAX_HEADER 256

enum state {
    ST_HEADER,     /* after `<|start|>assistant`: reading ` to=X` up to `<|message|>` */
    ST_REASONING,  /* a to=self body */
    ST_CONTENT,    /* a to=user / bare body */
    ST_TOOL,       /* a to=NAME body: buffered whole, parsed at its end */
    ST_AFTER_EOM,  /* after `<|eom|>`: expecting `<|start|>assistant` */
    ST_RAW,        /* not parsing (or degraded): everything is content */
};

struct muse_srv_channel {
    enum state st;
    const cJSON *tools;
    bool allow_calls;
    struct muse_srv_buf pend; /* bytes not yet consumed by the state machine */
};

struct muse_srv_channel *muse_srv_channel_new(bool parse, const cJSON *tools, bool allow_calls) {
    struct muse_srv_channel *ch = calloc(1, sizeof *ch);
    if (!ch) return NULL;
    ch->st = parse ? ST_HEADER : ST_RAW;
    ch->tools = tools;
    ch->allow_calls = allow_calls;
    return ch;
}

void muse_srv_channel_free(struct muse_srv_channel *ch) {
    if (!ch) return;
    muse_srv_buf_free(&ch->pend);
    free(ch);
}

static void emit(const struct muse_srv_channel_sink *sink, enum state st, const char *s, size_t n) {
    if (!n) return;
    if (st == ST_REASONING) {
        if (sink->reasoning) sink->reasoning(sink->ud, s, n);
    } else if (sink->content) {
        sink->content(sink->ud, s, n);
    }
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of marker. */
static size_t partial_suffix(const char *s, size_t n, const char *marker) {
    size_t m = strlen(marker);
    size_t max = n < m - 1 ? n : m - 1;
    for (size_t k = max; k > 0; k--)
        if (!memcmp(s + n - k, marker, k)) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, m)) return s + i;
    return NULL;
}

/*
 * Header check: is h[0..n) (no `<|message|>` yet) still a possible prefix of
 * `\s*(to=NAME\s*)?<|message|>`? NAME has no '<' and no newline.
 */
static bool header_possible(const char *h, size_t n) {
    size_t i = 0;
    while (i < n && (h[i] == ' ' || h[i] == '\t')) i++;
    if (i == n) return true;
    if (h[i] != '<') {
        const char *to = "to=";
        size_t k = 0;
        while (k < 3 && i < n && h[i] == to[k]) i++, k++;
        if (i == n) return true;
        if (k < 3) return false;
        while (i < n && h[i] != '<' && h[i] != '\n') i++;
        if (i == n) return true;
        if (h[i] == '\n') return false;
    }
    size_t rest = n - i;
    return rest < strlen(MARK_MESSAGE) && !memcmp(h + i, MARK_MESSAGE, rest);
}

/* Is h[0..n) (the text before `<|message|>`) a whole header: `\s*(to=NAME)?\s*` with no '<' or newline in NAME? */
static bool header_complete(const char *h, size_t n) {
    size_t i = 0;
    while (i < n && (h[i] == ' ' || h[i] == '\t')) i++;
    if (i == n) return true;
    if (n - i < 3 || memcmp(h + i, "to=", 3)) return false;
    for (i += 3; i < n; i++)
        if (h[i] == '<' || h[i] == '\n') return false;
    return true;
}

/* Recipient of a complete header (text before `<|message|>`): "" = bare. Writes into out. */
static void header_recipient(const char *h, size_t n, char *out, size_t cap) {
    size_t i = 0;
    while (i < n && isspace((unsigned char)h[i])) i++;
    out[0] = 0;
    if (n - i >= 3 && !memcmp(h + i, "to=", 3)) {
        i += 3;
        size_t j = i;
        while (j < n && !isspace((unsigned char)h[j])) j++;
        size_t len = j - i < cap - 1 ? j - i : cap - 1;
        memcpy(out, h + i, len);
        out[len] = 0;
    }
}

static void consume(struct muse_srv_channel *ch, size_t k) {
    memmove(ch->pend.p, ch->pend.p + k, ch->pend.len - k);
    ch->pend.len -= k;
    if (ch->pend.p) ch->pend.p[ch->pend.len] = 0;
}

/* A finished tool body: emit the call, or degrade the raw body to content. */
static void end_tool(struct muse_srv_channel *ch, const char *body, size_t n, const struct muse_srv_channel_sink *sink) {
    char *name = NULL, *args = NULL;
    if (ch->allow_calls && muse_srv_atem_parse(body, n, ch->tools, &name, &args)) {
        if (sink->tool_call) sink->tool_call(sink->ud, name, args);
    } else {
        emit(sink, ST_CONTENT, body, n);
    }
    free(name);
    free(args);
}

/* Run the state machine over pend; final = no more input will come. */
static void step(struct muse_srv_channel *ch, bool final, const struct muse_srv_channel_sink *sink) {
    for (;;) {
        char *p = ch->pend.p;
        size_t n = ch->pend.len;
        if (!n) return;
        switch (ch->st) {
        case ST_RAW:
            emit(sink, ST_CONTENT, p, n);
            consume(ch, n);
            return;
        case ST_HEADER: {
            const char *m = find(p, n, MARK_MESSAGE);
            if (m && (size_t)(m - p) <= MAX_HEADER && header_complete(p, (size_t)(m - p))) {
                char rcpt[128];
                header_recipient(p, (size_t)(m - p), rcpt, sizeof rcpt);
                if (!strcmp(rcpt, "self")) ch->st = ST_REASONING;
                else if (!rcpt[0] || !strcmp(rcpt, "user")) ch->st = ST_CONTENT;
                else ch->st = ST_TOOL;
                consume(ch, (size_t)(m - p) + strlen(MARK_MESSAGE));
                continue;
            }
            if (!m && !final && n < MAX_HEADER + strlen(MARK_MESSAGE) && header_possible(p, n)) return;
            ch->st = ST_RAW; /* headerless reply (JSON, digits, prose): content, verbatim */
            continue;
        }
        case ST_REASONING:
        case ST_CONTENT: {
            const char *eom = find(p, n, MARK_EOM);
            const char *eot = find(p, n, MARK_EOT);
            const char *end = eom && (!eot || eom < eot) ? eom : eot;
            if (end) {
                emit(sink, ch->st, p, (size_t)(end - p));
                bool was_eom = end == eom;
                consume(ch, (size_t)(end - p) + strlen(was_eom ? MARK_EOM : MARK_EOT));
                ch->st = was_eom ? ST_AFTER_EOM : ST_RAW;
                continue;
            }
            size_t hold = 0;
            if (!final) {
                size_t a = partial_suffix(p, n, MARK_EOM), b = partial_suffix(p, n, MARK_EOT);
                hold = a > b ? a : b;
            }
            emit(sink, ch->st, p, n - hold);
            consume(ch, n - hold);
            return;
        }
        case ST_TOOL: {
            const char *eom = find(p, n, MARK_EOM);
            const char *eot = find(p, n, MARK_EOT);
            const char *end = eom && (!eot || eom < eot) ? eom : eot;
            if (!end && !final) return;
            size_t body = end ? (size_t)(end - p) : n;
            end_tool(ch, p, body, sink);
            bool was_eom = end && end == eom;
            consume(ch, end ? body + strlen(was_eom ? MARK_EOM : MARK_EOT) : n);
            ch->st = was_eom ? ST_AFTER_EOM : ST_RAW;
            continue;
        }
        case ST_AFTER_EOM: {
            size_t m = strlen(MARK_START_ASSISTANT);
            size_t k = n < m ? n : m;
            if (memcmp(p, MARK_START_ASSISTANT, k)) {
                ch->st = ST_RAW; /* something other than a new assistant message: degrade */
                continue;
            }
            if (n < m) {
                if (final) consume(ch, n); /* a dangling partial marker is not content */
                return;
            }
            consume(ch, m);
            ch->st = ST_HEADER;
            continue;
        }
        }
    }
}

void muse_srv_channel_feed(struct muse_srv_channel *ch, const char *text, size_t n,
                           const struct muse_srv_channel_sink *sink) {
    if (!n) return;
    if (!muse_srv_buf_append(&ch->pend, text, n)) return; /* out of memory: text is lost, never a crash */
    step(ch, false, sink);
}

void muse_srv_channel_finish(struct muse_srv_channel *ch, const struct muse_srv_channel_sink *sink) {
    if (ch->st == ST_HEADER && ch->pend.len && header_possible(ch->pend.p, ch->pend.len)) {
        consume(ch, ch->pend.len); /* an unfinished header is never content */
        return;
    }
    step(ch, true, sink);
}

/* ---- ATEM ---- */

static void skip_ws(const char **p, const char *e) {
    while (*p < e && isspace((unsigned char)**p)) (*p)++;
}

static bool eat(const char **p, const char *e, const char *lit) {
    size_t m = strlen(lit);
    if ((size_t)(e - *p) < m || memcmp(*p, lit, m)) return false;
    *p += m;
    return true;
}

/* The JSON schema of parameter `key` of tool `name`, or NULL. */
static const cJSON *param_schema(const cJSON *tools, const char *name, const char *key) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        return cJSON_GetObjectItemCaseSensitive(props, key);
    }
    return NULL;
}

static bool schema_allows_string(const cJSON *schema) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsString(type)) return !strcmp(type->valuestring, "string");
    if (cJSON_IsArray(type)) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && !strcmp(t->valuestring, "string")) return true;
        return false;
    }
    return !cJSON_IsObject(schema) || !type; /* no type constraint: a string is allowed */
}

/* A typed value: raw text where the schema allows a string, else the JSON value it spells. */
static cJSON *typed_value(const char *v, size_t n, const cJSON *schema) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, v, n);
    s[n] = 0;
    cJSON *out = NULL;
    bool want_json = schema ? !schema_allows_string(schema) : false;
    if (!schema) {
        /* unknown parameter: numbers, booleans, null, lists and objects are JSON, the rest text */
        const char *q = s;
        while (isspace((unsigned char)*q)) q++;
        want_json = *q == '[' || *q == '{' || *q == '-' || isdigit((unsigned char)*q) || !strcmp(q, "true") ||
                    !strcmp(q, "false") || !strcmp(q, "null");
    }
    if (want_json) {
        const char *end = NULL;
        out = cJSON_ParseWithOpts(s, &end, true);
    }
    if (!out) out = cJSON_CreateString(s);
    free(s);
    return out;
}

bool muse_srv_atem_parse(const char *body, size_t n, const cJSON *tools, char **name_out, char **args_out) {
    const char *p = body, *e = body + n;
    char *name = NULL;
    cJSON *args = NULL;
    *name_out = *args_out = NULL;
    skip_ws(&p, e);
    if (!eat(&p, e, "<atem:function_calls>")) goto fail;
    skip_ws(&p, e);
    if (!eat(&p, e, "<atem:invoke name=\"")) goto fail;
    const char *q = memchr(p, '"', (size_t)(e - p));
    if (!q || q == p) goto fail;
    name = strndup(p, (size_t)(q - p));
    if (!name || strchr(name, '<')) goto fail;
    p = q + 1;
    if (!eat(&p, e, ">")) goto fail;
    args = cJSON_CreateObject();
    if (!args) goto fail;
    for (;;) {
        skip_ws(&p, e);
        if (eat(&p, e, "</atem:invoke>")) break;
        if (!eat(&p, e, "<atem:parameter name=\"")) goto fail;
        q = memchr(p, '"', (size_t)(e - p));
        if (!q || q == p) goto fail;
        char *key = strndup(p, (size_t)(q - p));
        if (!key) goto fail;
        p = q + 1;
        const char *vend = NULL;
        if (eat(&p, e, ">")) {
            const char *close = "</atem:parameter>";
            for (const char *r = p; r + strlen(close) <= e; r++)
                if (!memcmp(r, close, strlen(close))) { vend = r; break; }
        }
        if (!vend || cJSON_GetObjectItemCaseSensitive(args, key)) {
            free(key);
            goto fail;
        }
        cJSON *val = typed_value(p, (size_t)(vend - p), param_schema(tools, name, key));
        if (!val) {
            free(key);
            goto fail;
        }
        cJSON_AddItemToObject(args, key, val);
        free(key);
        p = vend + strlen("</atem:parameter>");
    }
    skip_ws(&p, e);
    if (!eat(&p, e, "</atem:function_calls>")) goto fail;
    skip_ws(&p, e);
    if (p != e) goto fail;
    *args_out = cJSON_PrintUnformatted(args);
    if (!*args_out) goto fail;
    cJSON_Delete(args);
    *name_out = name;
    return true;
fail:
    free(name);
    cJSON_Delete(args);
    return false;
}
