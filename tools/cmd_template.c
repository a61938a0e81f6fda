/*
 * cmd_template.c - `muse template`: render a chat template over a conversation file exactly as
 * transformers' apply_chat_template does (see docs/chat.md).
 *
 *   muse template [--template FILE.jinja | --model FILE.gguf] --conversation CONV.json [--bos TEXT]
 *                 [--eos TEXT] [--var NAME=JSON]... [--now YYYY-MM-DD]
 *
 * --model takes the GGUF's tokenizer.chat_template; without either the built-in Muse-Glimmer
 * template is used. Prints the rendered text with no
 * added newline; on a template error prints it on stderr and exits with status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "cli.h"
#include "text/chat.h"
#include "text/jinja.h"
#include "gguf/gguf.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 131072;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, 65536, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse template [--template FILE.jinja | --model FILE.gguf] --conversation CONV.json\n"
            "                     [--bos TEXT] [--eos TEXT] [--var NAME=JSON]... [--now YYYY-MM-DD]\n"
            "Prints the rendered prompt exactly (no newline added); template errors go to stderr, status 1.\n"
            "Without --template/--model the built-in Muse-Glimmer template renders.\n");
}

int cmd_template(int argc, char **argv) {
    const char *tpath = NULL, *mpath = NULL, *cpath = NULL, *bos = "", *eos = "", *now = NULL;
    const char *vars[64];
    int n_vars = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--template")) dst = &tpath;
        else if (!strcmp(a, "--model") || !strcmp(a, "-m")) dst = &mpath;
        else if (!strcmp(a, "--conversation")) dst = &cpath;
        else if (!strcmp(a, "--bos")) dst = &bos;
        else if (!strcmp(a, "--eos")) dst = &eos;
        else if (!strcmp(a, "--now")) dst = &now;
        else if (!strcmp(a, "--var")) {
            if (n_vars >= 64) {
                fprintf(stderr, "muse template: too many --var options\n");
                return 2;
            }
            dst = &vars[n_vars++];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            return cli_unknown(a);
        }
        const char *v = cli_next(argc, argv, &i);
        if (!v) return 2;
        *dst = v;
    }
    if (!cpath) return cli_usage_err("--conversation FILE.json is required");
    int rc = 1;
    char *tsrc = NULL, *csrc = NULL, *out = NULL;
    cJSON *conv = NULL, *ctx = NULL;
    struct muse_jinja_template *tmpl = NULL;
    struct muse_error err;
    size_t tlen = 0, clen = 0;
    if (tpath) {
        if (!(tsrc = read_file(tpath, &tlen))) {
            fprintf(stderr, "muse template: cannot read %s\n", tpath);
            goto done;
        }
    } else if (mpath) {
        struct muse_gguf *g = NULL;
        if (muse_gguf_open(mpath, &g, &err) != MUSE_OK) {
            fprintf(stderr, "muse template: %s\n", err.msg);
            goto done;
        }
        const struct muse_gguf_kv *kv = muse_gguf_find_kv(g, "tokenizer.chat_template");
        if (kv && kv->value.type == MUSE_GGUF_TYPE_STRING && (tsrc = malloc(kv->value.v.str.len + 1))) {
            tlen = (size_t)kv->value.v.str.len;
            memcpy(tsrc, kv->value.v.str.data, tlen);
            tsrc[tlen] = '\0';
            tpath = mpath;
        } else if (!kv) {
            fprintf(stderr, "muse template: %s has no tokenizer.chat_template; using the built-in template\n", mpath);
        }
        muse_gguf_free(g);
    }
    if (!(csrc = read_file(cpath, &clen))) {
        fprintf(stderr, "muse template: cannot read %s\n", cpath);
        goto done;
    }
    conv = cJSON_ParseWithLength(csrc, clen);
    if (!conv || !cJSON_IsObject(conv)) {
        fprintf(stderr, "muse template: %s is not a JSON object\n", cpath);
        goto done;
    }
    struct muse_jinja_options opts = {0};
    if (now) {
        if (sscanf(now, "%d-%d-%d", &opts.now_year, &opts.now_month, &opts.now_day) != 3) {
            fprintf(stderr, "muse template: bad --now '%s' (expected YYYY-MM-DD)\n", now);
            rc = 2;
            goto done;
        }
        opts.now_set = true;
    }
    ctx = muse_chat_context_from_conversation(conv, bos, eos, &err);
    if (!ctx) {
        fprintf(stderr, "muse template: %s\n", err.msg);
        goto done;
    }
    for (int i = 0; i < n_vars; i++) {
        const char *eq = strchr(vars[i], '=');
        if (!eq || eq == vars[i]) {
            fprintf(stderr, "muse template: bad --var '%s' (expected NAME=JSON)\n", vars[i]);
            rc = 2;
            goto done;
        }
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - vars[i]), vars[i]);
        cJSON *val = cJSON_Parse(eq + 1);
        if (!val) {
            fprintf(stderr, "muse template: --var %s: value is not valid JSON\n", name);
            rc = 2;
            goto done;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, name);
        cJSON_AddItemToObject(ctx, name, val);
    }
    muse_status st = tsrc ? muse_jinja_parse(tsrc, tlen, &tmpl, &err) : muse_chat_builtin_template(&tmpl, &err);
    if (st != MUSE_OK) {
        fprintf(stderr, "muse template: %s: %s\n", tpath ? tpath : "built-in template", err.msg);
        goto done;
    }
    size_t out_len = 0;
    if (muse_jinja_render(tmpl, ctx, &opts, &out, &out_len, &err) != MUSE_OK) {
        fprintf(stderr, "muse template: %s\n", err.msg);
        goto done;
    }
    if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0) {
        fprintf(stderr, "muse template: write error\n");
        goto done;
    }
    rc = 0;
done:
    free(out);
    muse_jinja_free(tmpl);
    cJSON_Delete(ctx);
    cJSON_Delete(conv);
    free(csrc);
    free(tsrc);
    return rc;
}
