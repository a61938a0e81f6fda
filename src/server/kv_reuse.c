/* kv_reuse.c - prompt-cache arithmetic shared by the scheduler and the engines. */
#include "server/engine_iface.h"
#include "server/sched.h"

int muse_srv_swa_safe_keep(int n_cached, int n_keep, int n_swa, int ring_rows) {
    if (n_keep < 0) n_keep = 0;
    if (n_keep > n_cached) n_keep = n_cached;
    if (n_swa <= 0 || ring_rows <= 0) return n_keep;
    /* Until the ring wraps every row is still there: any rewind is safe. */
    if (n_cached <= ring_rows) return n_keep;
    /*
     * Wrapped: the ring holds positions [n_cached - ring_rows, n_cached). Keeping n_keep positions
     * and then attending from position n_keep needs the window [n_keep - n_swa, n_keep) intact, so
     * n_cached - ring_rows <= n_keep - n_swa, i.e. a rewind of at most ring_rows - n_swa positions;
     * the extra -1 leaves room for the row the next token writes (TensorSharp's load-bearing +1).
     */
    int max_rewind = ring_rows - n_swa - 1;
    if (max_rewind < 0) max_rewind = 0;
    if (n_cached - n_keep <= max_rewind) return n_keep;
    return 0;
}

int muse_srv_common_prefix(const int32_t *a, int n_a, const int32_t *b, int n_b) {
    int n = n_a < n_b ? n_a : n_b;
    int i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}
