#include "gguf/tensor_type.h"

#include <strings.h>

#define ROW(id, nm, bs, ts) [id] = {.name = nm, .block_size = bs, .type_size = ts, .is_quantized = (bs) > 1}

const struct muse_type_layout muse_type_layouts[MUSE_TYPE_COUNT] = {
    ROW(MUSE_TYPE_F32, "f32", 1, 4),
    ROW(MUSE_TYPE_F16, "f16", 1, 2),
    ROW(MUSE_TYPE_Q4_0, "q4_0", 32, 18),
    ROW(MUSE_TYPE_Q4_1, "q4_1", 32, 20),
    ROW(MUSE_TYPE_Q5_0, "q5_0", 32, 22),
    ROW(MUSE_TYPE_Q5_1, "q5_1", 32, 24),
    ROW(MUSE_TYPE_Q8_0, "q8_0", 32, 34),
    ROW(MUSE_TYPE_Q8_1, "q8_1", 32, 36),
    ROW(MUSE_TYPE_Q2_K, "q2_k", 256, 84),
    ROW(MUSE_TYPE_Q3_K, "q3_k", 256, 110),
    ROW(MUSE_TYPE_Q4_K, "q4_k", 256, 144),
    ROW(MUSE_TYPE_Q5_K, "q5_k", 256, 176),
    ROW(MUSE_TYPE_Q6_K, "q6_k", 256, 210),
    ROW(MUSE_TYPE_Q8_K, "q8_k", 256, 292),
    ROW(MUSE_TYPE_IQ2_XXS, "iq2_xxs", 256, 66),
    ROW(MUSE_TYPE_IQ2_XS, "iq2_xs", 256, 74),
    ROW(MUSE_TYPE_IQ3_XXS, "iq3_xxs", 256, 98),
    ROW(MUSE_TYPE_IQ1_S, "iq1_s", 256, 50),
    ROW(MUSE_TYPE_IQ4_NL, "iq4_nl", 32, 18),
    ROW(MUSE_TYPE_IQ3_S, "iq3_s", 256, 110),
    ROW(MUSE_TYPE_IQ2_S, "iq2_s", 256, 82),
    ROW(MUSE_TYPE_IQ4_XS, "iq4_xs", 256, 136),
    ROW(MUSE_TYPE_I8, "i8", 1, 1),
    ROW(MUSE_TYPE_I16, "i16", 1, 2),
    ROW(MUSE_TYPE_I32, "i32", 1, 4),
    ROW(MUSE_TYPE_I64, "i64", 1, 8),
    ROW(MUSE_TYPE_F64, "f64", 1, 8),
    ROW(MUSE_TYPE_IQ1_M, "iq1_m", 256, 56),
    ROW(MUSE_TYPE_BF16, "bf16", 1, 2),
    ROW(MUSE_TYPE_TQ1_0, "tq1_0", 256, 54),
    ROW(MUSE_TYPE_TQ2_0, "tq2_0", 256, 66),
    ROW(MUSE_TYPE_MXFP4, "mxfp4", 32, 17),
    ROW(MUSE_TYPE_NVFP4, "nvfp4", 64, 36),
    ROW(MUSE_TYPE_Q1_0, "q1_0", 128, 18),
};

const struct muse_type_layout *muse_type_layout_get(uint32_t id) {
    if (id >= MUSE_TYPE_COUNT || !muse_type_layouts[id].name) return NULL;
    return &muse_type_layouts[id];
}

int muse_type_from_name(const char *name) {
    for (int i = 0; i < MUSE_TYPE_COUNT; i++)
        if (muse_type_layouts[i].name && !strcasecmp(muse_type_layouts[i].name, name)) return i;
    return -1;
}

size_t muse_type_row_size(enum muse_type type, int64_t ne0) {
    const struct muse_type_layout *l = &muse_type_layouts[type];
    return (size_t)(ne0 / l->block_size) * l->type_size;
}

double muse_type_bpw(enum muse_type type) {
    const struct muse_type_layout *l = &muse_type_layouts[type];
    return 8.0 * (double)l->type_size / (double)l->block_size;
}
