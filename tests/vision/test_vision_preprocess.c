/*
 * test_vision_preprocess.c - decode, grid, Lanczos resize and normalisation against the goldens
 * (golden/vision/preprocess/preprocess.json: every visible image at the default cap 4096 and the
 * extra caps 64 and 256), bit for bit: the decoded RGB, the resized RGB (SHA-256), the geometry;
 * the normalised sums within 1e-6 relative, the first planar values exactly. Plus the grid search
 * on the spec's table (4.3, 7) and the index maps of the tower on the spec's small cases and on the
 * encoder goldens' sp_perm / ds_perm.
 */
#include "vision/vision.h"
#include "vision_test_util.h"

static const struct muse_vision_prep prep = {14, 2, 4, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};

/* One cap of one image against its JSON entry (the top-level object or an extra_caps item). */
static void check_cap(const char *file, const struct muse_image *img, const cJSON *e, int32_t cap, const char *png) {
    struct muse_vision_input in;
    struct muse_error err;
    muse_status st = muse_vision_prep_image(&prep, img, cap, &in, &err);
    TEST_CONDF(st == MUSE_OK, "%s cap %d: preprocess failed: %s", file, cap, err.msg);
    if (st) return;
    const struct muse_image_geometry *g = &in.geom;
    TEST_CONDF(g->target_w == vt_num(e, "target_w") && g->target_h == vt_num(e, "target_h"),
               "%s cap %d: target %d x %d, golden %g x %g", file, cap, g->target_w, g->target_h, vt_num(e, "target_w"),
               vt_num(e, "target_h"));
    TEST_CONDF(g->grid_tok_cols == vt_num(e, "grid_tok_cols") && g->grid_tok_rows == vt_num(e, "grid_tok_rows") &&
                   g->n_tokens == vt_num(e, "n_tokens"),
               "%s cap %d: grid %d x %d = %d", file, cap, g->grid_tok_cols, g->grid_tok_rows, g->n_tokens);
    TEST_CONDF(g->patches_w == vt_num(e, "patches_w") && g->patches_h == vt_num(e, "patches_h"), "%s cap %d: patches",
               file, cap);
    TEST_CONDF(!!g->resampled == cJSON_IsTrue(cJSON_GetObjectItem(e, "resampled")), "%s cap %d: resampled flag", file, cap);
    char hex[65];
    vt_sha256_hex(in.resized.rgb, (size_t)g->target_w * g->target_h * 3, hex);
    TEST_CONDF(!strcmp(hex, vt_str(e, "resized_rgb_sha256")), "%s cap %d: resized RGB sha256 %s, golden %s", file, cap, hex,
               vt_str(e, "resized_rgb_sha256"));
    /* the normalised values: float64 sums of the f32 values */
    const size_t n = (size_t)3 * g->target_w * g->target_h;
    double sum = 0, sumsq = 0;
    for (size_t i = 0; i < n; i++) {
        sum += in.pixels[i];
        sumsq += (double)in.pixels[i] * in.pixels[i];
    }
    TEST_CONDF(n == vt_num(e, "norm_count"), "%s cap %d: %zu values", file, cap, n);
    const double gs = vt_num(e, "norm_sum"), gq = vt_num(e, "norm_sumsq");
    TEST_CONDF(fabs(sum - gs) <= 1e-6 * fmax(1.0, fabs(gq)), "%s cap %d: norm sum %.9g, golden %.9g", file, cap, sum, gs);
    TEST_CONDF(fabs(sumsq - gq) <= 1e-6 * gq, "%s cap %d: norm sumsq %.9g, golden %.9g", file, cap, sumsq, gq);
    const cJSON *f8 = cJSON_GetObjectItem(e, "norm_first8_planar_R");
    for (int i = 0; i < 8 && i < cJSON_GetArraySize(f8); i++)
        TEST_CONDF(in.pixels[i] == (float)cJSON_GetArrayItem(f8, i)->valuedouble, "%s cap %d: planar R[%d] %.9g", file,
                   cap, i, in.pixels[i]);
    if (png) { /* the golden's resized PNG decodes to the same bytes */
        struct muse_image ref;
        if (muse_image_load(png, 0, &ref, &err) == MUSE_OK) {
            TEST_CONDF(ref.width == g->target_w && ref.height == g->target_h &&
                           !memcmp(ref.rgb, in.resized.rgb, (size_t)g->target_w * g->target_h * 3),
                       "%s: differs from %s", file, png);
            muse_image_free(&ref);
        } else {
            TEST_CONDF(0, "%s: %s", png, err.msg);
        }
    }
    muse_vision_input_free(&in);
}

static void test_goldens(void) {
    char path[1024], png[1024];
    cJSON *root = vt_read_json(vt_golden("preprocess/preprocess.json", path, sizeof path));
    TEST_COND("preprocess.json loads", root != NULL);
    if (!root) return;
    TEST_COND("patch_hw 28, default cap 4096",
              vt_num(root, "patch_hw") == 28 && vt_num(root, "default_cap") == MUSE_VISION_DEFAULT_MAX_TOKENS);
    const cJSON *images = cJSON_GetObjectItem(root, "images"), *e;
    int n_images = 0, n_caps = 0;
    cJSON_ArrayForEach(e, images) {
        const char *file = vt_str(e, "file");
        char rel[256];
        snprintf(rel, sizeof rel, "images/%s", file);
        struct muse_image img;
        struct muse_error err;
        muse_status st = muse_image_load(vt_golden(rel, path, sizeof path), 0, &img, &err);
        TEST_CONDF(st == MUSE_OK, "%s: %s", file, err.msg);
        if (st) continue;
        n_images++;
        TEST_CONDF(img.width == vt_num(e, "src_w") && img.height == vt_num(e, "src_h"), "%s: decoded %d x %d", file,
                   img.width, img.height);
        TEST_CONDF(img.channels_in_file == vt_num(e, "src_channels_in_file"), "%s: %d channels in file", file,
                   img.channels_in_file);
        char hex[65];
        vt_sha256_hex(img.rgb, (size_t)img.width * img.height * 3, hex);
        TEST_CONDF(!strcmp(hex, vt_str(e, "decoded_rgb_sha256")), "%s: decoded RGB sha256 %s, golden %s", file, hex,
                   vt_str(e, "decoded_rgb_sha256"));
        snprintf(rel, sizeof rel, "preprocess/%s", vt_str(e, "resized_png"));
        check_cap(file, &img, e, (int32_t)vt_num(e, "cap"), vt_golden(rel, png, sizeof png));
        n_caps++;
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(e, "extra_caps")) {
            check_cap(file, &img, x, (int32_t)vt_num(x, "cap"), NULL);
            n_caps++;
        }
        muse_image_free(&img);
    }
    TEST_CONDF(n_images == 13 && n_caps == 39, "%d images, %d caps checked (13, 39 expected)", n_images, n_caps);
    /* the JPEG: the stb decode stored as PNG by the goldens */
    struct muse_image a, b;
    struct muse_error err;
    if (muse_image_load(vt_golden("images/img_640x480_photo.jpg", path, sizeof path), 0, &a, &err) == MUSE_OK &&
        muse_image_load(vt_golden("preprocess/img_640x480_photo.decoded_rgb.png", png, sizeof png), 0, &b, &err) == MUSE_OK) {
        TEST_COND("JPEG decodes as stb_image does", a.width == b.width && !memcmp(a.rgb, b.rgb, (size_t)640 * 480 * 3));
        muse_image_free(&a);
        muse_image_free(&b);
    } else {
        TEST_CONDF(0, "JPEG golden: %s", err.msg);
    }
    cJSON_Delete(root);
}

/* The grid search on the spec's table (vision.md 4.3 and 7). */
static void test_grid_table(void) {
    static const struct {
        int32_t w, h, cap, cols, rows;
    } cases[] = {
        {1024, 1024, 4096, 37, 37}, {336, 336, 4096, 12, 12},  {96, 64, 4096, 3, 2},     {200, 300, 4096, 7, 11},
        {100, 10, 4096, 4, 1},      {10, 10, 4096, 1, 1},      {20, 20, 4096, 1, 1},     {640, 480, 4096, 23, 17},
        {1920, 1080, 4096, 69, 39}, {3840, 2160, 4096, 85, 48}, {4032, 3024, 4096, 73, 55}, {4000, 2000, 4096, 90, 45},
        {3808, 5712, 4096, 52, 78}, {10000, 10000, 4096, 64, 64}, {3840, 2160, 1024, 42, 24}, {3840, 2160, 256, 21, 12},
        {3000, 50, 4096, 108, 2},   {10, 1000, 1, 1, 10},       {280, 280, 4096, 10, 10}, {140, 280, 4096, 5, 10},
        {20000, 10000, 4096, 90, 45},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t c, r;
        muse_image_grid(cases[i].w, cases[i].h, 28, cases[i].cap, &c, &r);
        TEST_CONDF(c == cases[i].cols && r == cases[i].rows, "grid %d x %d cap %d: %d x %d, spec %d x %d", cases[i].w,
                   cases[i].h, cases[i].cap, c, r, cases[i].cols, cases[i].rows);
    }
    struct muse_image_geometry g;
    TEST_COND("geometry 3840x2160: 18 windows",
              muse_vision_prep_geometry(&(struct muse_vision_prep){14, 2, 32, {0}, {1, 1, 1}}, 3840, 2160, 0, &g, NULL) ==
                      MUSE_OK &&
                  g.n_windows == 18 && g.target_w == 2380 && g.target_h == 1344 && g.n_tokens == 4080);
    TEST_COND("geometry refuses bad sizes", muse_vision_prep_geometry(&prep, 0, 10, 0, &g, NULL) == MUSE_ERR_INVALID_ARG &&
                                                muse_vision_prep_geometry(&prep, 10, 10, -1, &g, NULL) == MUSE_ERR_INVALID_ARG);
}

/* The window permutation and the pixel-shuffle gather (spec 5.3, 5.6, 7). */
static void test_index_maps(void) {
    int32_t perm[74 * 74], inv[74 * 74], seg[16];
    int32_t n = muse_vision_window_perm(3, 3, 2, perm, inv, seg);
    static const int32_t want3[9] = {0, 1, 3, 4, 2, 5, 6, 7, 8}, seg3[5] = {0, 4, 6, 8, 9};
    TEST_COND("window 2, 3x3 grid: perm", n == 4 && !memcmp(perm, want3, sizeof want3) && !memcmp(seg, seg3, sizeof seg3));
    for (int i = 0; i < 9; i++) TEST_CONDF(inv[perm[i]] == i, "inverse at %d", i);
    n = muse_vision_window_perm(74, 74, 32, perm, NULL, seg);
    static const int32_t len74[9] = {1024, 1024, 320, 1024, 1024, 320, 320, 320, 100};
    TEST_COND("74x74 patches: 9 windows", n == 9);
    for (int s = 0; s < 9 && s < n; s++) TEST_CONDF(seg[s + 1] - seg[s] == len74[s], "74x74 window %d: %d", s, seg[s + 1] - seg[s]);
    n = muse_vision_window_perm(20, 20, 32, perm, NULL, seg);
    bool ident = n == 1;
    for (int i = 0; i < 400; i++) ident = ident && perm[i] == i;
    TEST_COND("a grid inside one window is the identity", ident);
    int32_t ds[8];
    muse_vision_shuffle_perm(4, 2, 2, ds);
    static const int32_t want_ds[8] = {0, 1, 4, 5, 2, 3, 6, 7};
    TEST_COND("pixel shuffle 4x2", !memcmp(ds, want_ds, sizeof want_ds));
    /* the encoder goldens' maps */
    static const char *const cases[] = {"encoder/enc_336x336_cap64.json", "encoder/enc_700x300_cap64.json"};
    for (int c = 0; c < 2; c++) {
        char path[1024];
        cJSON *j = vt_read_json(vt_golden(cases[c], path, sizeof path));
        TEST_CONDF(j != NULL, "%s loads", cases[c]);
        if (!j) continue;
        const int32_t pw = (int32_t)vt_num(j, "patches_w"), ph = (int32_t)vt_num(j, "patches_h"),
                      win = (int32_t)vt_num(j, "window_side");
        int32_t *sp = malloc(sizeof(int32_t) * (size_t)(pw * ph)), *dsp = malloc(sizeof(int32_t) * (size_t)(pw * ph));
        int32_t sg[256];
        n = muse_vision_window_perm(pw, ph, win, sp, NULL, sg);
        muse_vision_shuffle_perm(pw, ph, 2, dsp);
        const cJSON *jsp = cJSON_GetObjectItem(j, "sp_perm"), *jds = cJSON_GetObjectItem(j, "ds_perm"),
                    *jseg = cJSON_GetObjectItem(j, "window_seg_len");
        bool ok = cJSON_GetArraySize(jsp) == pw * ph && cJSON_GetArraySize(jds) == pw * ph && cJSON_GetArraySize(jseg) == n;
        for (int i = 0; ok && i < pw * ph; i++)
            ok = sp[i] == cJSON_GetArrayItem(jsp, i)->valueint && dsp[i] == cJSON_GetArrayItem(jds, i)->valueint;
        for (int s = 0; ok && s < n; s++) ok = sg[s + 1] - sg[s] == cJSON_GetArrayItem(jseg, s)->valueint;
        TEST_CONDF(ok, "%s: sp_perm, ds_perm and window lengths", cases[c]);
        free(sp);
        free(dsp);
        cJSON_Delete(j);
    }
}

/* Resize corner cases: a copy when nothing changes, one pass when one side changes, no overflow
 * at extreme contrast. */
static void test_resize(void) {
    uint8_t px[4 * 3 * 3];
    for (int i = 0; i < 36; i++) px[i] = (uint8_t)(i % 2 ? 255 : 0);
    struct muse_image src = {4, 3, 3, px}, out;
    TEST_COND("same size copies", muse_image_resize(&src, 4, 3, &out, NULL) == MUSE_OK && !memcmp(out.rgb, px, 36));
    muse_image_free(&out);
    TEST_COND("width only", muse_image_resize(&src, 9, 3, &out, NULL) == MUSE_OK && out.width == 9 && out.height == 3);
    muse_image_free(&out);
    TEST_COND("tiny to large", muse_image_resize(&src, 300, 1, &out, NULL) == MUSE_OK);
    muse_image_free(&out);
    TEST_COND("bad size refused", muse_image_resize(&src, 0, 3, &out, NULL) == MUSE_ERR_INVALID_ARG && out.rgb == NULL);
}

int main(void) {
    test_grid_table();
    test_index_maps();
    test_resize();
    test_goldens();
    return TEST_REPORT();
}
