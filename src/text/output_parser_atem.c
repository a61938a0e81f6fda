/*
 * output_parser_atem.c - one ATEM call ("<atem:function_calls> <atem:invoke name=N>
 * (<atem:parameter name=K>V</atem:parameter>)* </atem:invoke> </atem:function_calls>") to a
 * function name and a typed JSON arguments object. Positional scan; anything unexpected fails
 * (the caller then degrades the message to content).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "text/output_parser.h"

struct scan {
    const char *s;
    size_t n, i;
};

static void skip_ws(struct scan *sc) {
    while (sc->i < sc->n && isspace((unsigned char)sc->s[sc->i])) sc->i++;
}

static bool lit(struct scan *sc, const char *t) {
    size_t l = strlen(t);
    if (sc->n - sc->i < l || memcmp(sc->s + sc->i, t, l) != 0) return false;
    sc->i += l;
    return true;
}

/* `"VALUE"` then optional spaces and `>`; returns a malloc'd copy of VALUE. */
static char *quoted_then_gt(struct scan *sc) {
    if (!lit(sc, "\"")) return NULL;
    size_t st = sc->i;
    /* a NUL ends nothing but the C string it would become: such a name is malformed (fuzz_output_parser) */
    while (sc->i < sc->n && sc->s[sc->i] != '"' && sc->s[sc->i] != '\n' && sc->s[sc->i] != '<' && sc->s[sc->i] != '\0')
        sc->i++;
    if (sc->i >= sc->n || sc->s[sc->i] != '"' || sc->i == st) return NULL;
    size_t e = sc->i++;
    while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t')) sc->i++;
    if (!lit(sc, ">")) return NULL;
    char *r = malloc(e - st + 1);
    if (!r) return NULL;
    memcpy(r, sc->s + st, e - st);
    r[e - st] = '\0';
    return r;
}

/* The JSON schema of parameter `key` of tool `name` in an OpenAI tools array, or NULL. */
static const cJSON *param_schema(const cJSON *tools, const char *name, const char *key) {
    if (!cJSON_IsArray(tools)) return NULL;
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn)) fn = t;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name) != 0) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        return cJSON_GetObjectItemCaseSensitive(props, key);
    }
    return NULL;
}

int muse_atem_schema_allows_string(const cJSON *schema) {
    if (!cJSON_IsObject(schema)) return -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsString(type)) return strcmp(type->valuestring, "string") == 0;
    if (cJSON_IsArray(type)) {
        for (const cJSON *t = type->child; t; t = t->next)
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "string")) return 1;
        return 0;
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (cJSON_IsArray(en) && en->child) return cJSON_IsString(en->child);
    return -1;
}

/* A cJSON value for a parameter's raw text. */
static cJSON *typed_value(const char *v, size_t len, int str_ok) {
    char *copy = malloc(len + 1);
    if (!copy) return NULL;
    memcpy(copy, v, len);
    copy[len] = '\0';
    cJSON *r = NULL;
    bool try_json = str_ok != 1 && len > 0 && !isspace((unsigned char)v[0]) &&
                    !isspace((unsigned char)v[len - 1]);
    if (try_json) {
        const char *end = NULL;
        cJSON *parsed = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
        if (parsed && end == copy + len && !cJSON_IsString(parsed)) {
            /* keep the model's exact number text (64-bit integers survive) */
            r = cJSON_CreateRaw(copy);
        }
        cJSON_Delete(parsed);
    }
    if (!r) r = cJSON_CreateString(copy);
    free(copy);
    return r;
}

muse_status muse_atem_parse(const char *body, size_t len, const cJSON *tools, char **name,
                            char **arguments) {
    *name = *arguments = NULL;
    struct scan sc = {.s = body, .n = len};
    char *fname = NULL, *key = NULL;
    cJSON *args = cJSON_CreateObject();
    if (!args) return MUSE_ERR_NOMEM;
    skip_ws(&sc);
    if (!lit(&sc, "<atem:function_calls>")) goto fail;
    skip_ws(&sc);
    if (!lit(&sc, "<atem:invoke name=") || !(fname = quoted_then_gt(&sc))) goto fail;
    for (;;) {
        skip_ws(&sc);
        if (lit(&sc, "</atem:invoke>")) break;
        if (!lit(&sc, "<atem:parameter name=") || !(key = quoted_then_gt(&sc))) goto fail;
        const char *close = NULL;
        static const char end_tag[] = "</atem:parameter>";
        for (size_t k = sc.i; k + sizeof(end_tag) - 1 <= sc.n; k++)
            if (!memcmp(sc.s + k, end_tag, sizeof(end_tag) - 1)) {
                close = sc.s + k;
                break;
            }
        if (!close) goto fail;
        size_t vlen = (size_t)(close - (sc.s + sc.i));
        cJSON *val = typed_value(sc.s + sc.i, vlen, muse_atem_schema_allows_string(param_schema(tools, fname, key)));
        if (!val) goto fail;
        if (cJSON_GetObjectItemCaseSensitive(args, key)) { /* given twice: ambiguous */
            cJSON_Delete(val);
            goto fail;
        }
        cJSON_AddItemToObject(args, key, val);
        free(key);
        key = NULL;
        sc.i += vlen + sizeof(end_tag) - 1;
    }
    skip_ws(&sc);
    if (!lit(&sc, "</atem:function_calls>")) goto fail;
    skip_ws(&sc);
    if (sc.i != sc.n) goto fail;
    *arguments = cJSON_PrintUnformatted(args);
    if (!*arguments) goto fail;
    cJSON_Delete(args);
    *name = fname;
    return MUSE_OK;
fail:
    free(key);
    free(fname);
    cJSON_Delete(args);
    return MUSE_ERR_FORMAT;
}
