/*
 * cmd_image.c - `muse image`: the vision parity interface. Decodes an image, shows what the
 * preprocessing makes of it (grid, target size, token count, SHA-256 of the resized RGB), and
 * optionally writes the resized image (PNG), the projected rows (float32 .npy [n_tokens, n_embd of
 * the text model]) and every intermediate stage of the tower (.npy per stage, for the goldens).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "core/sha256.h"
#include "core/timer.h"
#include "muse.h"
#include "npy.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: muse image --mmproj MMPROJ.gguf --image FILE [options]\n"
            "\n"
            "Preprocesses an image for a Muse-Glimmer vision projector as llama.cpp's mtmd does and, with\n"
            "--embd, runs the projector (vision tower + adapter).\n"
            "\n"
            "  --mmproj PATH            the vision projector GGUF (general.architecture = clip)\n"
            "  --image PATH             PNG, JPEG, GIF (first frame), BMP or WebP\n"
            "  --image-max-tokens N     at most N merged tokens (default 4096, as llama.cpp)\n"
            "  --resized OUT.png        write the resized RGB image\n"
            "  --embd OUT.npy           encode and write the projected rows, float32 [n_tokens, n_embd_out]\n"
            "  --dump-stages DIR        encode and write every intermediate stage as DIR/<stage>.npy\n"
            "                           (also: MUSE_VISION_DUMP=DIR)\n"
            "  --encode                 encode without writing the rows (timing)\n"
            "  --json                   print one JSON object instead of text\n"
            "  --threads N              encoder threads (default: physical cores)\n"
            "  --backend cpu|ref        cpu (default) or ref (the plain-C oracle, 1 thread)\n"
            "  --max-pixels N           refuse images with more pixels (default %lld)\n",
            (long long)MUSE_IMAGE_MAX_PIXELS_DEFAULT);
}

struct dump_ctx {
    const char *dir;
    int failed;
    struct muse_error err;
};

static void dump_stage(void *user, const char *stage, const float *data, int64_t rows, int64_t cols) {
    struct dump_ctx *d = user;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", d->dir, stage);
    if (!d->failed && npy_write_f32(path, data, rows, cols, &d->err)) d->failed = 1;
}

int cmd_image(int argc, char **argv) {
    const char *mmproj = NULL, *image = NULL, *resized_path = NULL, *embd_path = NULL, *dump_dir = NULL;
    const char *backend = NULL;
    bool json = false, encode = false;
    int64_t max_tokens = 0, threads = 0, max_pixels = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--mmproj")) {
            if (!(mmproj = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--image")) {
            if (!(image = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--resized")) {
            if (!(resized_path = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--embd")) {
            if (!(embd_path = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dump-stages")) {
            if (!(dump_dir = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--backend")) {
            if (!(backend = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--image-max-tokens")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, INT32_MAX, &max_tokens)) return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, 256, &threads)) return 2;
        } else if (!strcmp(a, "--max-pixels")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_parse_int(a, v, 1, INT64_MAX, &max_pixels)) return 2;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--encode")) {
            encode = true;
        } else {
            fprintf(stderr, "muse image: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!mmproj || !image) {
        fprintf(stderr, "muse image: --mmproj and --image are required\n");
        usage(stderr);
        return 2;
    }
    if (!dump_dir && getenv("MUSE_VISION_DUMP") && *getenv("MUSE_VISION_DUMP")) dump_dir = getenv("MUSE_VISION_DUMP");
    encode = encode || embd_path || dump_dir;

    struct muse_error err = {0};
    struct dump_ctx dump = {dump_dir, 0, {0}};
    struct muse_vision_params vp = muse_vision_default_params();
    vp.backend = backend;
    vp.n_threads = (uint32_t)threads;
    if (dump_dir) {
        if (mkdir(dump_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "muse image: cannot create directory '%s'\n", dump_dir);
            return 1;
        }
        vp.stage = dump_stage;
        vp.stage_user = &dump;
    }
    struct muse_vision *vision = NULL;
    struct muse_image img = {0};
    struct muse_vision_input in = {0};
    float *rows = NULL;
    int rc = 1;
    if (muse_vision_load(mmproj, vp, &vision, &err) || muse_image_load(image, max_pixels, &img, &err) ||
        muse_vision_preprocess(vision, &img, (int32_t)max_tokens, &in, &err)) {
        fprintf(stderr, "muse image: %s\n", err.msg);
        goto done;
    }
    if (resized_path && muse_image_save_png(&in.resized, resized_path, &err)) {
        fprintf(stderr, "muse image: %s\n", err.msg);
        goto done;
    }
    struct muse_vision_info info;
    muse_vision_get_info(vision, &info);
    const struct muse_image_geometry *g = &in.geom;
    double encode_ms = 0;
    if (encode) {
        rows = malloc(sizeof(float) * (size_t)g->n_tokens * (size_t)info.n_embd_out);
        if (!rows) {
            fprintf(stderr, "muse image: out of memory for %d rows\n", g->n_tokens);
            goto done;
        }
        const int64_t t0 = muse_time_us();
        if (muse_vision_encode(vision, &in, rows, &err)) {
            fprintf(stderr, "muse image: %s\n", err.msg);
            goto done;
        }
        encode_ms = (double)(muse_time_us() - t0) / 1e3;
        if (dump.failed) {
            fprintf(stderr, "muse image: %s\n", dump.err.msg);
            goto done;
        }
        if (embd_path && npy_write_f32(embd_path, rows, g->n_tokens, info.n_embd_out, &err)) {
            fprintf(stderr, "muse image: %s\n", err.msg);
            goto done;
        }
    }
    uint8_t digest[MUSE_SHA256_SIZE];
    char hex[2 * MUSE_SHA256_SIZE + 1];
    muse_sha256(in.resized.rgb, (size_t)g->target_w * (size_t)g->target_h * 3, digest);
    muse_sha256_hex(digest, hex);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "src_w", g->src_w);
        cJSON_AddNumberToObject(o, "src_h", g->src_h);
        cJSON_AddNumberToObject(o, "src_channels_in_file", img.channels_in_file);
        cJSON_AddNumberToObject(o, "target_w", g->target_w);
        cJSON_AddNumberToObject(o, "target_h", g->target_h);
        cJSON_AddNumberToObject(o, "grid_tok_cols", g->grid_tok_cols);
        cJSON_AddNumberToObject(o, "grid_tok_rows", g->grid_tok_rows);
        cJSON_AddNumberToObject(o, "n_tokens", g->n_tokens);
        cJSON_AddNumberToObject(o, "patches_w", g->patches_w);
        cJSON_AddNumberToObject(o, "patches_h", g->patches_h);
        cJSON_AddNumberToObject(o, "n_windows", g->n_windows);
        cJSON_AddBoolToObject(o, "resampled", g->resampled != 0);
        cJSON_AddStringToObject(o, "resized_rgb_sha256", hex);
        cJSON_AddNumberToObject(o, "n_embd_out", info.n_embd_out);
        if (encode) {
            cJSON_AddNumberToObject(o, "encode_ms", encode_ms);
            cJSON_AddNumberToObject(o, "tokens_per_s", encode_ms > 0 ? g->n_tokens / (encode_ms / 1e3) : 0);
            cJSON_AddStringToObject(o, "backend", info.backend);
            cJSON_AddNumberToObject(o, "threads", info.n_threads);
        }
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s ? s : "{}");
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("image: %s (%d x %d, %d channel%s in file)\n", image, g->src_w, g->src_h, img.channels_in_file,
               img.channels_in_file == 1 ? "" : "s");
        printf("target: %d x %d (%s), grid %d x %d = %d token%s, %d x %d patches, %d window%s\n", g->target_w,
               g->target_h, g->resampled ? "Lanczos-3" : "copy", g->grid_tok_cols, g->grid_tok_rows, g->n_tokens,
               g->n_tokens == 1 ? "" : "s", g->patches_w, g->patches_h, g->n_windows, g->n_windows == 1 ? "" : "s");
        printf("resized rgb sha256: %s\n", hex);
        if (encode)
            printf("encoded: %d rows x %d in %.1f ms (%.1f tokens/s, backend %s, %d thread%s)\n", g->n_tokens,
                   info.n_embd_out, encode_ms, encode_ms > 0 ? g->n_tokens / (encode_ms / 1e3) : 0.0, info.backend,
                   info.n_threads, info.n_threads == 1 ? "" : "s");
    }
    rc = 0;
done:
    free(rows);
    muse_vision_input_free(&in);
    muse_image_free(&img);
    muse_vision_free(vision);
    return rc;
}
