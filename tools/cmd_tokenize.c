/*
 * cmd_tokenize.c - `muse tokenize`: text -> token ids, or ids -> text, with the model's tokenizer.
 *
 *   muse tokenize -m MODEL (--text T | --file F) [--no-bos] [--special] [--pieces] [--json]
 *   muse tokenize -m MODEL --detokenize --ids 1,2,3 [--special] [--json]
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "text/tokenizer.h"
#include "gguf/gguf.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse tokenize -m MODEL (--text T | --file F) [--no-bos] [--special] [--pieces] [--json]\n"
            "       muse tokenize -m MODEL --detokenize --ids 1,2,3 [--special] [--json]\n"
            "\n"
            "  -m, --model PATH  GGUF file with a tokenizer (a vocab-only file is fine)\n"
            "  --text T          text to tokenize (bytes as given)\n"
            "  --file F          read the text from file F ('-' = stdin), byte for byte\n"
            "  --no-bos          do not prepend BOS (default: tokenizer.ggml.add_bos_token)\n"
            "  --special         match special-token texts such as <|eot|> in the text; when\n"
            "                    detokenizing, render CONTROL tokens\n"
            "  --pieces          print each token's id and text, one per line\n"
            "  --json            print JSON: {\"n_tokens\", \"ids\", \"pieces\"} or {\"text\"}\n"
            "  --detokenize      decode the --ids list to text (written raw to stdout)\n"
            "  --ids LIST        comma-separated token ids\n"
            "\n"
            "Default output: the ids, comma-separated (usable as --ids).\n");
}

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            if (ferror(f)) break;
            *len = n;
            return buf;
        }
        char *p = realloc(buf, cap * 2);
        if (!p) break;
        buf = p;
        cap *= 2;
    }
    free(buf);
    return NULL;
}

/* Bytes made printable for a terminal: valid UTF-8 as is, controls and invalid bytes escaped. */
static void print_escaped(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = (uint8_t)s[i];
        if (c == '\n') fputs("\\n", f), i++;
        else if (c == '\t') fputs("\\t", f), i++;
        else if (c == '\r') fputs("\\r", f), i++;
        else if (c == '\\') fputs("\\\\", f), i++;
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c), i++;
        else if (c < 0x80) fputc((int)c, f), i++;
        else {
            size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
            bool ok = need && i + need <= n;
            for (size_t k = 1; ok && k < need; k++) ok = ((uint8_t)s[i + k] & 0xc0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, need, f);
                i += need;
            } else {
                fprintf(f, "\\x%02x", c);
                i++;
            }
        }
    }
}

/* A JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD (the detokenizer's rule). */
static cJSON *json_text(const struct muse_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags) {
    struct muse_detok *d = muse_detok_init(tok, flags);
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    for (size_t i = 0; d && buf && i <= n; i++) {
        const char *t;
        size_t tl;
        if ((i < n ? muse_detok_push(d, ids[i], &t, &tl) : muse_detok_flush(d, &t, &tl)) != MUSE_OK) break;
        if (len + tl + 1 > cap) {
            while (len + tl + 1 > cap) cap *= 2;
            char *p = realloc(buf, cap);
            if (!p) break;
            buf = p;
        }
        memcpy(buf + len, t, tl);
        len += tl;
    }
    cJSON *j = NULL;
    if (buf) {
        buf[len] = '\0';
        /* cJSON strings end at NUL: a NUL inside the text is cut there (rare in practice) */
        j = cJSON_CreateString(buf);
    }
    free(buf);
    muse_detok_free(d);
    return j;
}

static int print_json(cJSON *root) {
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) {
        fprintf(stderr, "muse tokenize: out of memory\n");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *ids_arg = NULL;
    bool no_bos = false, special = false, pieces = false, json = false, detok = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--text") || !strcmp(a, "-p")) {
            if (!(text = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--file") || !strcmp(a, "-f")) {
            if (!(file = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            if (!(ids_arg = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--pieces")) {
            pieces = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--detokenize")) {
            detok = true;
        } else {
            return cli_unknown(a);
        }
    }
    if (!model || (detok ? !ids_arg || text || file : (!text == !file) || ids_arg)) {
        return cli_usage_err("%s", !model ? "-m MODEL is required"
                                   : detok ? "--detokenize needs --ids (and no --text/--file)"
                                           : "give exactly one of --text or --file (or --detokenize --ids)");
    }

    int32_t *ids = NULL;
    int n_ids = 0;
    if (detok && !cli_parse_ids("--ids", ids_arg, &ids, &n_ids)) return 2;
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "muse tokenize: cannot open %s\n", file);
            free(ids);
            return 1;
        }
        buf = read_all(f, &len);
        if (f != stdin) fclose(f);
        if (!buf) {
            fprintf(stderr, "muse tokenize: cannot read %s\n", file);
            free(ids);
            return 1;
        }
        text = buf;
    } else if (text) {
        len = strlen(text);
    }

    struct muse_gguf *g = NULL;
    struct muse_tokenizer *tok = NULL;
    struct muse_error err;
    int rc = 1;
    if (muse_gguf_open(model, &g, &err) != MUSE_OK || muse_tokenizer_init_from_gguf(g, &tok, &err) != MUSE_OK) {
        fprintf(stderr, "muse tokenize: %s\n", err.msg); /* the message names the file */
        goto done;
    }
    muse_gguf_free(g);
    g = NULL;

    if (detok) {
        unsigned flags = special ? MUSE_DECODE_SPECIAL : 0;
        for (int i = 0; i < n_ids; i++)
            if (ids[i] >= muse_tokenizer_n_vocab(tok)) {
                fprintf(stderr, "muse tokenize: token id %d out of range (n_vocab %d)\n", ids[i],
                        muse_tokenizer_n_vocab(tok));
                goto done;
            }
        if (json) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddItemToObject(root, "text", json_text(tok, ids, (size_t)n_ids, flags));
            rc = print_json(root);
            goto done;
        }
        char *out = NULL;
        size_t n = 0;
        if (muse_tokenizer_decode_alloc(tok, ids, (size_t)n_ids, flags, &out, &n, &err) != MUSE_OK) {
            fprintf(stderr, "muse tokenize: %s\n", err.msg);
            goto done;
        }
        fwrite(out, 1, n, stdout);
        free(out);
        rc = 0;
        goto done;
    }

    unsigned flags = (special ? MUSE_TOKENIZE_PARSE_SPECIAL : 0) |
                     (!no_bos && muse_tokenizer_add_bos(tok) ? MUSE_TOKENIZE_ADD_BOS : 0);
    size_t n = 0;
    if (muse_tokenizer_encode_alloc(tok, text, len, flags, &ids, &n, &err) != MUSE_OK) {
        fprintf(stderr, "muse tokenize: %s\n", err.msg);
        goto done;
    }
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "n_tokens", (double)n);
        cJSON *arr = cJSON_AddArrayToObject(root, "ids");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
        if (pieces) {
            cJSON *p = cJSON_AddArrayToObject(root, "pieces");
            for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(p, json_text(tok, &ids[i], 1, MUSE_DECODE_SPECIAL));
        }
        rc = print_json(root);
    } else if (pieces) {
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = muse_tokenizer_token_bytes(tok, ids[i], &pl);
            printf("%6d  '", ids[i]);
            print_escaped(stdout, p, pl);
            printf("'\n");
        }
        rc = 0;
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        printf("\n");
        rc = 0;
    }
done:
    muse_tokenizer_free(tok);
    muse_gguf_free(g);
    free(ids);
    free(buf);
    return rc;
}
