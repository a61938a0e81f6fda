/* backend.c - the registry of forward backends (backend.h). */
#include "backend/backend.h"

#include <string.h>

#include "kernels/types.h"

/* Registered backends, the default first. A new backend adds one line here. */
static const struct muse_backend_ops *const backends[] = {
    &muse_backend_cpu_ops,
    &muse_backend_ref_ops,
};

const struct muse_backend_ops *muse_backend_find(const char *name) {
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strcmp(backends[i]->name, name)) return backends[i];
    return NULL;
}

bool muse_backend_type_supported(enum muse_type type) {
    if ((unsigned)type >= MUSE_TYPE_COUNT || !muse_type_layout_get(type)) return false;
    const struct muse_type_traits *t = &muse_type_traits[type];
    if (!t->vec_dot_ref) return false;
    enum muse_type vt = t->vec_dot_type;
    if (vt == MUSE_TYPE_F32) return true;
    return (unsigned)vt < MUSE_TYPE_COUNT && muse_type_traits[vt].from_float != NULL;
}

struct muse_weight muse_weight_rows(const struct muse_weight *w, int64_t r0, int64_t n) {
    struct muse_weight v = *w;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_size;
    v.ne1 = n;
    /* the interleaved copy holds whole groups of 8 rows: a view from another boundary has none */
    v.r8 = w->r8 && r0 % 8 == 0 && r0 + 8 <= w->ne1 / 8 * 8 ? (const uint8_t *)w->r8 + (size_t)r0 * w->row_size : NULL;
    return v;
}
