/*
 * synth_vocab.c - the byte-level BPE vocabulary of synthetic Muse-Glimmer files.
 *
 * Three phases, all deterministic and depending only on n_vocab:
 *   1. ids 0..255: the single bytes (id = byte value);
 *   2. merges learned by plain BPE training on the built-in word list (synth_words.c), each word
 *      weighted by its rank and seen as " word", "word", " Word" and "Word" (the pieces the
 *      llama4 pre-tokenizer makes), plus a few punctuation, whitespace and number pieces;
 *   3. when the word list is exhausted before the vocabulary is full (vocabularies of more than
 *      ~8k tokens), filler words: a learned word-initial token (" the") joined with a learned
 *      lower-case token ("ory"), each with its own merge, drawn with a fixed PRNG.
 * Every merge's sides are earlier tokens and every merge result is a token, so llama.cpp's BPE
 * and muse's both tokenize real English into multi-byte tokens. Then the CONTROL special tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "synth/synth.h"

/* ---- byte-to-unicode (GPT-2) ---------------------------------------------------------- */

/* Code point of byte b in the GPT-2 alphabet: printable Latin-1 bytes map to themselves, the 68
 * others to U+0100.. in increasing byte order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'). */
static uint32_t byte_code_point(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae)) return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae))) n++;
    return 0x100 + n;
}

/* Encode len raw bytes in the GPT-2 alphabet as UTF-8 into out (room for 2*len+1). */
static size_t encode_gpt2(const uint8_t *raw, size_t len, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = byte_code_point(raw[i]);
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else {
            out[o++] = (char)(0xc0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[o] = 0;
    return o;
}

/* ---- raw token store with a string hash set --------------------------------------------- */

struct store {
    uint8_t *bytes;       /* all raw token bytes back to back */
    size_t n_bytes, cap_bytes;
    uint32_t *off, *len;  /* [cap] per token */
    int32_t n, cap;
    int32_t *slots;       /* hash slots: token id or -1 */
    uint32_t n_slots;     /* power of two, > 2 * n */
};

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int32_t store_find(const struct store *s, const uint8_t *p, size_t n) {
    uint32_t mask = s->n_slots - 1;
    for (uint32_t i = (uint32_t)hash_bytes(p, n) & mask;; i = (i + 1) & mask) {
        int32_t id = s->slots[i];
        if (id < 0) return -1;
        if (s->len[id] == n && !memcmp(s->bytes + s->off[id], p, n)) return id;
    }
}

/* Append a new token (the caller checked it is absent). Returns its id or -1 on OOM. */
static int32_t store_add(struct store *s, const uint8_t *p, size_t n) {
    if (s->n_bytes + n > s->cap_bytes) {
        size_t cap = s->cap_bytes * 2 + n + 4096;
        uint8_t *b = realloc(s->bytes, cap);
        if (!b) return -1;
        s->bytes = b;
        s->cap_bytes = cap;
    }
    if (s->n == s->cap) {
        int32_t cap = s->cap * 2 + 1024;
        uint32_t *off = realloc(s->off, (size_t)cap * sizeof(uint32_t));
        if (!off) return -1;
        s->off = off;
        uint32_t *len = realloc(s->len, (size_t)cap * sizeof(uint32_t));
        if (!len) return -1;
        s->len = len;
        s->cap = cap;
    }
    if ((uint32_t)(s->n + 1) * 2 >= s->n_slots) {
        uint32_t n_slots = s->n_slots ? s->n_slots * 2 : 4096;
        int32_t *slots = malloc((size_t)n_slots * sizeof(int32_t));
        if (!slots) return -1;
        memset(slots, 0xff, (size_t)n_slots * sizeof(int32_t));
        for (int32_t id = 0; id < s->n; id++) {
            uint32_t i = (uint32_t)hash_bytes(s->bytes + s->off[id], s->len[id]) & (n_slots - 1);
            while (slots[i] >= 0) i = (i + 1) & (n_slots - 1);
            slots[i] = id;
        }
        free(s->slots);
        s->slots = slots;
        s->n_slots = n_slots;
    }
    int32_t id = s->n++;
    memcpy(s->bytes + s->n_bytes, p, n);
    s->off[id] = (uint32_t)s->n_bytes;
    s->len[id] = (uint32_t)n;
    s->n_bytes += n;
    uint32_t i = (uint32_t)hash_bytes(p, n) & (s->n_slots - 1);
    while (s->slots[i] >= 0) i = (i + 1) & (s->n_slots - 1);
    s->slots[i] = id;
    return id;
}

static void store_free(struct store *s) {
    free(s->bytes);
    free(s->off);
    free(s->len);
    free(s->slots);
}

/* ---- BPE training ------------------------------------------------------------------------ */

#define MAX_PIECE 40   /* bytes per training piece */

struct piece {
    int32_t sym[MAX_PIECE]; /* current symbols (token ids) */
    int32_t n;
    int64_t weight;
};

/* Pair counts: open addressing on the key (a << 32 | b); tombstones are never needed because a
 * pair's entry stays (with count 0) once created. */
struct pairs {
    uint64_t *keys;
    int64_t *counts;
    uint32_t n, n_slots;
};

#define EMPTY_KEY UINT64_MAX

static uint32_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static bool pairs_grow(struct pairs *p) {
    uint32_t n_slots = p->n_slots ? p->n_slots * 2 : 1u << 14;
    uint64_t *keys = malloc((size_t)n_slots * sizeof(uint64_t));
    int64_t *counts = malloc((size_t)n_slots * sizeof(int64_t));
    if (!keys || !counts) {
        free(keys);
        free(counts);
        return false;
    }
    for (uint32_t i = 0; i < n_slots; i++) keys[i] = EMPTY_KEY;
    for (uint32_t j = 0; j < p->n_slots; j++) {
        if (p->keys[j] == EMPTY_KEY) continue;
        uint32_t i = pair_hash(p->keys[j]) & (n_slots - 1);
        while (keys[i] != EMPTY_KEY) i = (i + 1) & (n_slots - 1);
        keys[i] = p->keys[j];
        counts[i] = p->counts[j];
    }
    free(p->keys);
    free(p->counts);
    p->keys = keys;
    p->counts = counts;
    p->n_slots = n_slots;
    return true;
}

static bool pairs_add(struct pairs *p, int32_t a, int32_t b, int64_t delta) {
    if ((p->n + 1) * 2 >= p->n_slots && !pairs_grow(p)) return false;
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = pair_hash(k) & (p->n_slots - 1);
    while (p->keys[i] != EMPTY_KEY && p->keys[i] != k) i = (i + 1) & (p->n_slots - 1);
    if (p->keys[i] == EMPTY_KEY) {
        p->keys[i] = k;
        p->counts[i] = 0;
        p->n++;
    }
    p->counts[i] += delta;
    return true;
}

static bool piece_count(struct pairs *p, const struct piece *pc, int64_t sign) {
    for (int32_t i = 0; i + 1 < pc->n; i++)
        if (!pairs_add(p, pc->sym[i], pc->sym[i + 1], sign * pc->weight)) return false;
    return true;
}

static bool piece_has_pair(const struct piece *pc, int32_t a, int32_t b) {
    for (int32_t i = 0; i + 1 < pc->n; i++)
        if (pc->sym[i] == a && pc->sym[i + 1] == b) return true;
    return false;
}

/* Replace every non-overlapping (a, b), left to right, by c: what BPE does with one merge. */
static void piece_merge(struct piece *pc, int32_t a, int32_t b, int32_t c) {
    int32_t o = 0;
    for (int32_t i = 0; i < pc->n; i++) {
        if (i + 1 < pc->n && pc->sym[i] == a && pc->sym[i + 1] == b) {
            pc->sym[o++] = c;
            i++;
        } else {
            pc->sym[o++] = pc->sym[i];
        }
    }
    pc->n = o;
}

/* Pieces besides the words: whitespace, punctuation, code and numbers, with fixed weights. */
static const char *const extra_pieces[] = {
    "\n", "\n\n", "  ", "    ", "        ", "\t", ",", ".", ".\n", ":", ";", "!", "?", "'", "\"", " \"",
    "(", ")", " (", "()", "();\n", " {\n", "}\n", " =", " ==", " !=", " ->", " +", " -", " *", " /",
    "://", "/", " <", ">", "</", "<|", "|>", " [", "]", "_", " #", " //", "...", " -", " 0", " 1",
    "0", "1", "2", "3", "10", "12", "20", "100", "000", "200", "201", "202", "25", "50", "99",
};

static bool add_piece(struct piece *pieces, size_t *n, const char *prefix, const char *word, bool cap,
                      int64_t weight) {
    size_t lp = strlen(prefix), lw = strlen(word);
    if (lp + lw == 0 || lp + lw > MAX_PIECE || weight <= 0) return false;
    struct piece *pc = &pieces[*n];
    pc->n = 0;
    for (size_t i = 0; i < lp; i++) pc->sym[pc->n++] = (uint8_t)prefix[i];
    for (size_t i = 0; i < lw; i++) {
        uint8_t c = (uint8_t)word[i];
        if (cap && i == 0 && c >= 'a' && c <= 'z') c = (uint8_t)(c - 'a' + 'A');
        pc->sym[pc->n++] = c;
    }
    pc->weight = weight;
    (*n)++;
    return true;
}

/* splitmix64: the fixed PRNG of the filler phase. */
static uint64_t mix_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A merge is kept as its two sides (token ids) until the strings are made. */
struct merge_ids {
    int32_t *a, *b;
    int32_t n, cap;
};

static bool merges_push(struct merge_ids *m, int32_t a, int32_t b) {
    if (m->n == m->cap) {
        int32_t cap = m->cap * 2 + 1024;
        int32_t *na = realloc(m->a, (size_t)cap * sizeof(int32_t));
        if (!na) return false;
        m->a = na;
        int32_t *nb = realloc(m->b, (size_t)cap * sizeof(int32_t));
        if (!nb) return false;
        m->b = nb;
        m->cap = cap;
    }
    m->a[m->n] = a;
    m->b[m->n] = b;
    m->n++;
    return true;
}

/* Join tokens a and b into the store (new token or the existing one with that text). */
static int32_t store_join(struct store *s, int32_t a, int32_t b, bool *is_new) {
    uint8_t buf[2 * 256];
    uint32_t la = s->len[a], lb = s->len[b];
    if (la + lb > sizeof(buf)) return -1;
    memcpy(buf, s->bytes + s->off[a], la);
    memcpy(buf + la, s->bytes + s->off[b], lb);
    int32_t id = store_find(s, buf, la + lb);
    *is_new = id < 0;
    return id >= 0 ? id : store_add(s, buf, la + lb);
}

/* Phase 2: BPE training until the store holds n_normal tokens or no pair is left. */
static muse_status learn_merges(struct store *s, struct merge_ids *m, int32_t n_normal, struct muse_error *err) {
    size_t cap = 4 * muse_synth_n_words + sizeof(extra_pieces) / sizeof(extra_pieces[0]);
    struct piece *pieces = calloc(cap, sizeof(struct piece));
    struct pairs pairs = {0};
    muse_status st = MUSE_ERR_NOMEM;
    if (!pieces) goto fail;
    size_t n = 0;
    for (size_t r = 0; r < muse_synth_n_words; r++) {
        int64_t w = 1000000 / (int64_t)(r + 10);
        add_piece(pieces, &n, " ", muse_synth_words[r], false, w);
        add_piece(pieces, &n, "", muse_synth_words[r], false, w / 4 + 1);
        add_piece(pieces, &n, " ", muse_synth_words[r], true, w / 8 + 1);
        add_piece(pieces, &n, "", muse_synth_words[r], true, w / 16 + 1); /* sentence start */
    }
    for (size_t i = 0; i < sizeof(extra_pieces) / sizeof(extra_pieces[0]); i++)
        add_piece(pieces, &n, "", extra_pieces[i], false, 5000);
    for (size_t i = 0; i < n; i++)
        if (!piece_count(&pairs, &pieces[i], 1)) goto fail;

    while (s->n < n_normal) {
        /* the most frequent pair; ties go to the smaller (left id, right id) */
        uint64_t best = EMPTY_KEY;
        int64_t best_count = 0;
        for (uint32_t i = 0; i < pairs.n_slots; i++) {
            if (pairs.keys[i] == EMPTY_KEY || pairs.counts[i] <= 0) continue;
            if (pairs.counts[i] > best_count || (pairs.counts[i] == best_count && pairs.keys[i] < best)) {
                best = pairs.keys[i];
                best_count = pairs.counts[i];
            }
        }
        if (best_count <= 0) break;
        int32_t a = (int32_t)(best >> 32), b = (int32_t)(best & 0xffffffffu);
        bool is_new;
        int32_t c = store_join(s, a, b, &is_new);
        if (c < 0 || !merges_push(m, a, b)) goto fail;
        for (size_t i = 0; i < n; i++) {
            if (!piece_has_pair(&pieces[i], a, b)) continue;
            if (!piece_count(&pairs, &pieces[i], -1)) goto fail;
            piece_merge(&pieces[i], a, b, c);
            if (!piece_count(&pairs, &pieces[i], 1)) goto fail;
        }
    }
    st = MUSE_OK;
fail:
    free(pieces);
    free(pairs.keys);
    free(pairs.counts);
    if (st != MUSE_OK) return muse_error_set(err, st, "synth vocab: out of memory while learning merges");
    return MUSE_OK;
}

static bool is_lower_word(const struct store *s, int32_t id) {
    const uint8_t *p = s->bytes + s->off[id];
    for (uint32_t i = 0; i < s->len[id]; i++)
        if (p[i] < 'a' || p[i] > 'z') return false;
    return s->len[id] >= 2;
}

static bool is_word_start(const struct store *s, int32_t id) {
    const uint8_t *p = s->bytes + s->off[id];
    if (s->len[id] < 3 || p[0] != ' ') return false;
    for (uint32_t i = 1; i < s->len[id]; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z'))) return false;
    return true;
}

/* Phase 3: filler words " word" + "suffix" until n_normal tokens (or candidates run out). */
static muse_status fill_words(struct store *s, struct merge_ids *m, int32_t n_normal, struct muse_error *err) {
    int32_t n_learned = s->n;
    int32_t *heads = malloc((size_t)n_learned * sizeof(int32_t));
    int32_t *tails = malloc((size_t)n_learned * sizeof(int32_t));
    muse_status st = MUSE_ERR_NOMEM;
    if (!heads || !tails) goto fail;
    int32_t n_heads = 0, n_tails = 0;
    for (int32_t id = 256; id < n_learned; id++) {
        if (is_word_start(s, id)) heads[n_heads++] = id;
        if (is_lower_word(s, id)) tails[n_tails++] = id;
    }
    uint64_t rng = 0x5eed5eed5eedull;
    int64_t misses = 0;
    while (s->n < n_normal && n_heads > 0 && n_tails > 0 && misses < 1000000) {
        int32_t a = heads[mix_next(&rng) % (uint64_t)n_heads];
        int32_t b = tails[mix_next(&rng) % (uint64_t)n_tails];
        if (s->len[a] + s->len[b] > 32) {
            misses++;
            continue;
        }
        bool is_new;
        int32_t c = store_join(s, a, b, &is_new);
        if (c < 0) goto fail;
        if (!is_new) {
            misses++;
            continue;
        }
        if (!merges_push(m, a, b)) goto fail;
    }
    st = MUSE_OK;
fail:
    free(heads);
    free(tails);
    if (st != MUSE_OK) return muse_error_set(err, st, "synth vocab: out of memory while making filler tokens");
    return MUSE_OK;
}

/* ---- special tokens ---------------------------------------------------------------------- */

struct special {
    int32_t offset; /* id - 200000 in the real vocabulary */
    const char *text;
};

static const struct special specials[] = {
    {0, "<|begin_of_text|>"}, {1, "<|end_of_text|>"}, {7, "<|eom|>"},        {8, "<|eot|>"},
    {18, "<|finetune_right_pad|>"}, {22, "<|start|>"}, {23, "<|message|>"}, {80, "<|image_start|>"},
    {81, "<|image_end|>"},    {91, "<|video|>"},   {92, "<|patch|>"},      {1818, "<|mask|>"},
};
#define N_SPECIALS ((int32_t)(sizeof(specials) / sizeof(specials[0])))

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- the vocabulary ---------------------------------------------------------------------- */

void muse_synth_vocab_free(struct muse_synth_vocab *v) {
    if (!v) return;
    if (v->tokens)
        for (int32_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    if (v->merges)
        for (int32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v);
}

muse_status muse_synth_vocab_build(int32_t n_vocab, struct muse_synth_vocab **out, struct muse_error *err) {
    *out = NULL;
    if (n_vocab < MUSE_SYNTH_MIN_VOCAB)
        return muse_error_set(err, MUSE_ERR_INVALID_ARG, "synth vocab: n_vocab %d is below the minimum %d",
                              (int)n_vocab, MUSE_SYNTH_MIN_VOCAB);
    bool real = n_vocab >= MUSE_SYNTH_REAL_VOCAB;
    int32_t n_normal = real ? MUSE_SYNTH_REAL_SPECIAL_BASE : n_vocab - N_SPECIALS;
    struct store s = {0};
    struct merge_ids m = {0};
    struct muse_synth_vocab *v = calloc(1, sizeof(*v));
    muse_status st = MUSE_ERR_NOMEM;
    if (!v) goto fail;
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        if (store_add(&s, &byte, 1) != b) goto fail;
    }
    if ((st = learn_merges(&s, &m, n_normal, err)) != MUSE_OK) goto fail;
    v->n_learned = m.n;
    if ((st = fill_words(&s, &m, n_normal, err)) != MUSE_OK) goto fail;
    st = MUSE_ERR_NOMEM;

    v->n_tokens = n_vocab;
    v->tokens = calloc((size_t)n_vocab, sizeof(char *));
    v->types = calloc((size_t)n_vocab, sizeof(int32_t));
    v->merges = calloc((size_t)m.n + 1, sizeof(char *));
    if (!v->tokens || !v->types || !v->merges) goto fail;
    char buf[2 * 1024 + 64];
    for (int32_t id = 0; id < s.n; id++) {
        encode_gpt2(s.bytes + s.off[id], s.len[id], buf);
        if (!(v->tokens[id] = dup_str(buf))) goto fail;
        v->types[id] = MUSE_SYNTH_TOKEN_NORMAL;
    }
    /* ids between the last normal token and the special block: [PAD<id>] UNUSED (as the converter
     * writes ids without a token); only reached when the candidates of phase 3 run out */
    int32_t special_base = real ? MUSE_SYNTH_REAL_SPECIAL_BASE : n_vocab - N_SPECIALS;
    for (int32_t id = s.n; id < n_vocab; id++) {
        bool in_block = real ? (id >= special_base && id < MUSE_SYNTH_REAL_VOCAB) : id >= special_base;
        if (in_block) continue;
        snprintf(buf, sizeof(buf), "[PAD%d]", (int)id);
        if (!(v->tokens[id] = dup_str(buf))) goto fail;
        v->types[id] = MUSE_SYNTH_TOKEN_UNUSED;
    }
    int32_t *roles[N_SPECIALS] = {&v->bos, &v->eos,        &v->eom,       &v->eot,       &v->pad,   &v->start,
                                  &v->message, &v->image_start, &v->image_end, &v->video, &v->patch, &v->mask};
    if (real) {
        for (int32_t k = 0; k < MUSE_SYNTH_REAL_VOCAB - MUSE_SYNTH_REAL_SPECIAL_BASE; k++) {
            snprintf(buf, sizeof(buf), "<|reserved_special_token_%d|>", (int)k);
            const char *text = buf;
            for (int32_t j = 0; j < N_SPECIALS; j++)
                if (specials[j].offset == k) text = specials[j].text;
            if (!(v->tokens[special_base + k] = dup_str(text))) goto fail;
            v->types[special_base + k] = MUSE_SYNTH_TOKEN_CONTROL;
        }
        for (int32_t j = 0; j < N_SPECIALS; j++) *roles[j] = special_base + specials[j].offset;
    } else {
        for (int32_t j = 0; j < N_SPECIALS; j++) {
            if (!(v->tokens[special_base + j] = dup_str(specials[j].text))) goto fail;
            v->types[special_base + j] = MUSE_SYNTH_TOKEN_CONTROL;
            *roles[j] = special_base + j;
        }
    }
    for (int32_t i = 0; i < m.n; i++) {
        size_t o = encode_gpt2(s.bytes + s.off[m.a[i]], s.len[m.a[i]], buf);
        buf[o++] = ' ';
        encode_gpt2(s.bytes + s.off[m.b[i]], s.len[m.b[i]], buf + o);
        if (!(v->merges[i] = dup_str(buf))) goto fail;
        v->n_merges = i + 1;
    }
    store_free(&s);
    free(m.a);
    free(m.b);
    *out = v;
    return MUSE_OK;
fail:
    store_free(&s);
    free(m.a);
    free(m.b);
    muse_synth_vocab_free(v);
    if (st == MUSE_ERR_NOMEM) return muse_error_set(err, st, "synth vocab: out of memory");
    return st;
}
