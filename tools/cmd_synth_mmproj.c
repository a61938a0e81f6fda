/* cmd_synth_mmproj.c - `muse synth --mmproj`: write a synthetic Muse-Glimmer vision projector, or
 * convert the matrices of an existing one to another type (synth/synth_mmproj.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "gguf/tensor_type.h"
#include "synth/synth_mmproj.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse synth --mmproj [--preset tiny|30b] [options] -o OUT.gguf\n"
            "       muse synth --mmproj --from MMPROJ.gguf --type TYPE -o OUT.gguf\n"
            "\n"
            "Writes a synthetic Muse-Glimmer vision projector (clip.* keys and v.* / mm.* tensors as the real\n"
            "file, random weights), or rewrites an existing one with its tower and adapter matrices in TYPE.\n"
            "\n"
            "  --preset NAME      tiny (default: 4 layers, n_embd 64, the golden vis-mmproj's shape) or 30b\n"
            "                     (50 layers, n_embd 1536, n_ff 8960, 16 heads, 32 x 32 positions, adapter\n"
            "                     6144 -> 4096 -> 4096 -> 6656, Q8_0); the options below override it\n"
            "  --layers N --embd N --ff N --heads N --patch N\n"
            "  --pos-side N       the position table is N x N patches (= the attention window side)\n"
            "  --mm0 N --mm1 N    the adapter's hidden widths\n"
            "  --out N            the output width (the text model's n_embd)\n"
            "  --type TYPE        the tower's matrices (f32, f16, bf16, q8_0, q4_k, ...)\n"
            "  --mm-type TYPE     the adapter's matrices (default: --type)\n"
            "  --seed N           PRNG seed (default 1)\n"
            "  --from PATH        convert PATH instead of generating (with --type)\n"
            "  -o, --output PATH  output file (required)\n"
            "  -q, --quiet        no summary\n");
}

static bool parse_type(const char *opt, const char *v, enum muse_type *out) {
    for (int t = 0; t < MUSE_TYPE_COUNT; t++) {
        const struct muse_type_layout *l = muse_type_layout_get((uint32_t)t);
        if (l && !strcasecmp(l->name, v)) {
            *out = (enum muse_type)t;
            return true;
        }
    }
    fprintf(stderr, "muse synth: bad value for %s: '%s' (a ggml type name such as f32, f16, q8_0, q4_k)\n", opt, v);
    return false;
}

int cmd_synth_mmproj(int argc, char **argv) {
    const char *preset = "tiny", *out = NULL, *from = NULL;
    bool quiet = false, type_set = false, mm_type_set = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[i + 1];
    }
    struct muse_synth_mmproj_config cfg;
    struct muse_error err;
    if (muse_synth_mmproj_preset(preset, &cfg, &err)) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 2;
    }
    enum muse_type type = cfg.type, mm_type = cfg.mm_type;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int32_t *dim = NULL;
        if (!strcmp(a, "--layers")) dim = &cfg.n_layer;
        else if (!strcmp(a, "--embd")) dim = &cfg.n_embd;
        else if (!strcmp(a, "--ff")) dim = &cfg.n_ff;
        else if (!strcmp(a, "--heads")) dim = &cfg.n_head;
        else if (!strcmp(a, "--patch")) dim = &cfg.patch_size;
        else if (!strcmp(a, "--pos-side")) dim = &cfg.pos_side;
        else if (!strcmp(a, "--mm0")) dim = &cfg.n_mm0;
        else if (!strcmp(a, "--mm1")) dim = &cfg.n_mm1;
        else if (!strcmp(a, "--out")) dim = &cfg.n_out;
        if (dim) {
            int64_t x;
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, INT32_MAX, &x)) return 2;
            *dim = (int32_t)x;
        } else if (!strcmp(a, "--mmproj") || !strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = quiet || a[1] == 'q' || !strcmp(a, "--quiet");
        } else if (!strcmp(a, "--preset")) {
            if (!cli_next(argc, argv, &i)) return 2;
        } else if (!strcmp(a, "--type")) {
            if (!(v = cli_next(argc, argv, &i)) || !parse_type(a, v, &type)) return 2;
            type_set = true;
        } else if (!strcmp(a, "--mm-type")) {
            if (!(v = cli_next(argc, argv, &i)) || !parse_type(a, v, &mm_type)) return 2;
            mm_type_set = true;
        } else if (!strcmp(a, "--seed")) {
            int64_t s;
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 0, INT64_MAX, &s)) return 2;
            cfg.seed = (uint64_t)s;
        } else if (!strcmp(a, "--from")) {
            if (!(from = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_next(argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "muse synth: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "muse synth: -o OUT.gguf is required\n");
        return 2;
    }
    const int64_t t0 = muse_time_us();
    if (from) {
        if (!type_set) {
            fprintf(stderr, "muse synth: --from needs --type\n");
            return 2;
        }
        if (muse_synth_mmproj_convert(from, type, out, &err)) {
            fprintf(stderr, "muse synth: %s\n", err.msg);
            return 1;
        }
        if (!quiet) fprintf(stderr, "wrote %s: %s with %s matrices\n", out, from, muse_type_layout_get(type)->name);
        return 0;
    }
    cfg.type = type;
    cfg.mm_type = mm_type_set ? mm_type : type_set ? type : cfg.mm_type;
    if (muse_synth_mmproj_write(&cfg, out, &err)) {
        fprintf(stderr, "muse synth: %s\n", err.msg);
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "wrote %s: mmproj %s, %d layers, n_embd %d, %.1f MB of tensor data, %.2f s\n", out, cfg.preset,
                cfg.n_layer, cfg.n_embd, (double)muse_synth_mmproj_data_bytes(&cfg) / 1e6,
                (double)(muse_time_us() - t0) / 1e6);
    return 0;
}
