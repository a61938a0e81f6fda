/* tool_grammar.c - the whole-output grammars of a chat answer (tool_grammar.h): a forced ATEM tool
 * call, a JSON answer under a schema. */
#include "gen/tool_grammar.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/gbnf_buf.h"
#include "gen/gbnf_rules.h"
#include "gen/json_schema.h"
#include "text/output_parser.h"

/* Raw text: no '<' (tags stay unambiguous), no C0 controls but tab and newlines, and no code points
 * the lenient decoder (llama.cpp's) would take that are not Unicode scalar values. */
#define TEXT_CHAR "[^<\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F\\uD800-\\uDFFF\\U00110000-\\U001FFFFF]"
/* The reasoning a forced call may start with, in code points (then <|eom|> is forced). */
#define MAX_THINK 1024

/* A literal with the GBNF escapes (muse_gbnf_literal) appended to b. */
static void put_lit(struct gbuf *b, const char *s) {
    char *l = muse_gbnf_literal(s, strlen(s));
    if (!l) {
        b->oom = true;
        return;
    }
    gbuf_puts(b, l);
    free(l);
}

/* The value rule of one parameter, appended to b. */
static muse_status value_rule(struct muse_gbnf_rules *r, const char *tool, const char *key, const cJSON *schema,
                              const cJSON *doc, struct gbuf *b, struct muse_error *err) {
    const int s = muse_atem_schema_allows_string(schema);
    if (s == 1) {
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
        if (cJSON_IsArray(en) && en->child) {
            gbuf_puts(b, "(");
            const cJSON *v;
            bool first = true;
            cJSON_ArrayForEach(v, en) {
                if (!cJSON_IsString(v) || strchr(v->valuestring, '<')) continue;
                if (!first) gbuf_puts(b, " | ");
                put_lit(b, v->valuestring);
                first = false;
            }
            if (first)
                return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tool '%s' parameter '%s': no enum value can be written",
                                      tool, key);
            gbuf_puts(b, ")");
            return MUSE_OK;
        }
        if (cJSON_GetObjectItemCaseSensitive(schema, "pattern") || cJSON_GetObjectItemCaseSensitive(schema, "format"))
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED,
                                  "tool '%s' parameter '%s': pattern and format cannot be enforced on a raw string value",
                                  tool, key);
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(schema, "minLength");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(schema, "maxLength");
        long long lo = cJSON_IsNumber(mn) && mn->valuedouble > 0 ? (long long)mn->valuedouble : 0;
        long long hi = cJSON_IsNumber(mx) && mx->valuedouble >= 0 ? (long long)mx->valuedouble : -1;
        if (hi >= 0 && hi < lo)
            return muse_error_set(err, MUSE_ERR_UNSUPPORTED, "tool '%s' parameter '%s': maxLength below minLength", tool, key);
        char base[300];
        snprintf(base, sizeof base, "%.120s-%.120s-text", tool, key);
        char *rep = muse_gbnf_repeat(r, "text-char", lo, hi, base);
        if (!rep) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
        gbuf_puts(b, rep);
        free(rep);
        return MUSE_OK;
    }
    if (s == -1 && (!cJSON_IsObject(schema) || (!cJSON_GetObjectItemCaseSensitive(schema, "anyOf") &&
                                                 !cJSON_GetObjectItemCaseSensitive(schema, "oneOf") &&
                                                 !cJSON_GetObjectItemCaseSensitive(schema, "allOf") &&
                                                 !cJSON_GetObjectItemCaseSensitive(schema, "$ref") &&
                                                 !cJSON_GetObjectItemCaseSensitive(schema, "const") &&
                                                 !cJSON_GetObjectItemCaseSensitive(schema, "properties")))) {
        gbuf_puts(b, "text-char*"); /* untyped: any text, typed back by the output parser */
        return MUSE_OK;
    }
    char name[300];
    snprintf(name, sizeof name, "%.120s-%.120s", tool, key);
    const char *rule = NULL;
    muse_status st = muse_gbnf_rules_add_schema(r, schema, doc, name, &rule, err);
    if (st != MUSE_OK) return st;
    gbuf_puts(b, rule);
    return MUSE_OK;
}

static const cJSON *tool_fn(const cJSON *t) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    return cJSON_IsObject(fn) ? fn : t;
}

/* The rule of one tool's call: header, invoke, parameters. Returns its name (owned by r). */
static muse_status call_rule(struct muse_gbnf_rules *r, const cJSON *fn, int idx, const char **out, struct muse_error *err) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const char *name = nm->valuestring;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(params, "required");
    struct gbuf b = {0};
    char text[400];
    muse_status st = MUSE_OK;
    put_lit(&b, name);
    gbuf_puts(&b, " <|message|> ");
    snprintf(text, sizeof text, "<atem:function_calls>\n<atem:invoke name=\"%.300s\">\n", name);
    put_lit(&b, text);
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        bool required = false;
        const cJSON *q;
        cJSON_ArrayForEach(q, req) required |= cJSON_IsString(q) && !strcmp(q->valuestring, p->string);
        gbuf_puts(&b, required ? " " : " (");
        snprintf(text, sizeof text, "<atem:parameter name=\"%.300s\">", p->string);
        put_lit(&b, text);
        gbuf_putc(&b, ' ');
        if ((st = value_rule(r, name, p->string, p, params, &b, err)) != MUSE_OK) goto out;
        gbuf_puts(&b, " ");
        put_lit(&b, "</atem:parameter>\n");
        if (!required) gbuf_puts(&b, ")?");
    }
    gbuf_puts(&b, " ");
    put_lit(&b, "</atem:invoke>\n</atem:function_calls>");
    char rname[64];
    snprintf(rname, sizeof rname, "call-%d", idx);
    const char *body = gbuf_str(&b);
    if (!body || !(*out = muse_gbnf_rules_add(r, rname, body))) st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
out:
    gbuf_free(&b);
    return st;
}

/* The optional reasoning block every whole-output grammar starts with: " to=self<|message|>", at
 * most MAX_THINK code points without "<|", "<|eom|><|start|>assistant". */
static bool add_think(struct muse_gbnf_rules *r) {
    char *think = muse_gbnf_repeat(r, "think-char", 0, MAX_THINK, "think-text");
    const bool ok = think && muse_gbnf_rules_add(r, "think", "\" to=self\" <|message|> think-text <|eom|> <|start|> \"assistant\"") &&
                    muse_gbnf_rules_add(r, "think-text", think) &&
                    muse_gbnf_rules_add(r, "think-char", "text-char | \"<\" [^|<]") &&
                    muse_gbnf_rules_add(r, "text-char", TEXT_CHAR);
    free(think);
    return ok;
}

muse_status muse_chat_json_grammar(const char *schema, size_t len, char **gbnf, struct muse_error *err) {
    *gbnf = NULL;
    cJSON *doc = cJSON_ParseWithLength(schema, len);
    if (!doc) return muse_error_set(err, MUSE_ERR_FORMAT, "the JSON schema is not JSON");
    struct muse_gbnf_rules *r = muse_gbnf_rules_create();
    const char *rule = NULL;
    muse_status st = r ? muse_gbnf_rules_add_schema(r, doc, doc, "answer", &rule, err)
                       : muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    if (st == MUSE_OK) {
        char root[160];
        snprintf(root, sizeof root, "think? \" to=user\" <|message|> %s", rule);
        if (!add_think(r) || !muse_gbnf_rules_add(r, "root", root) || !(*gbnf = muse_gbnf_rules_format(r)))
            st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    }
    muse_gbnf_rules_free(r);
    cJSON_Delete(doc);
    return st;
}

muse_status muse_tool_call_grammar(const cJSON *tools, const char *name, char **gbnf, struct muse_error *err) {
    *gbnf = NULL;
    if (!cJSON_IsArray(tools)) return muse_error_set(err, MUSE_ERR_INVALID_ARG, "tools must be an array");
    struct muse_gbnf_rules *r = muse_gbnf_rules_create();
    struct gbuf alts = {0};
    muse_status st = MUSE_OK;
    if (!r) return muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
    int idx = 0, n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = tool_fn(t);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(nm) || !nm->valuestring[0]) {
            st = muse_error_set(err, MUSE_ERR_INVALID_ARG, "tools[%d] has no function name", idx);
            goto out;
        }
        if (!name || !strcmp(name, nm->valuestring)) {
            const char *rule = NULL;
            if ((st = call_rule(r, fn, idx, &rule, err)) != MUSE_OK) goto out;
            if (n++) gbuf_puts(&alts, " | ");
            gbuf_puts(&alts, rule);
        }
        idx++;
    }
    if (!n) {
        st = name ? muse_error_set(err, MUSE_ERR_INVALID_ARG, "no tool named '%.100s'", name)
                  : muse_error_set(err, MUSE_ERR_INVALID_ARG, "no tools to call");
        goto out;
    }
    const char *a = gbuf_str(&alts);
    if (!a || !muse_gbnf_rules_add(r, "call", a) || !add_think(r) || !muse_gbnf_rules_add(r, "root", "think? \" to=\" call") ||
        !(*gbnf = muse_gbnf_rules_format(r)))
        st = muse_error_set(err, MUSE_ERR_NOMEM, "out of memory");
out:
    gbuf_free(&alts);
    muse_gbnf_rules_free(r);
    return st;
}
