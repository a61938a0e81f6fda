/* test_kv_reuse.c - the server's prompt-cache arithmetic: common token prefixes and how far a
 * sliding-window cache can rewind (kv_reuse.c, sched.c). */
#include <stdint.h>

#include "server/engine_iface.h"
#include "server/sched.h"
#include "test.h"

int main(void) {
    int32_t a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 3, 9}, c[] = {7};
    TEST_COND("lcp partial", muse_srv_common_prefix(a, 5, b, 4) == 3);
    TEST_COND("lcp none", muse_srv_common_prefix(a, 5, c, 1) == 0);
    TEST_COND("lcp prefix", muse_srv_common_prefix(a, 3, a, 5) == 3);
    TEST_COND("lcp empty", muse_srv_common_prefix(a, 0, b, 4) == 0);
    TEST_COND("swa: no window keeps all", muse_srv_swa_safe_keep(10000, 9000, 0, 0) == 9000);
    TEST_COND("swa: ring not wrapped", muse_srv_swa_safe_keep(4000, 100, 2048, 4352) == 100);
    /* wrapped ring of 4352 rows, window 2048: a rewind of up to 2303 positions is safe (TensorSharp) */
    TEST_COND("swa: rewind 2303 ok", muse_srv_swa_safe_keep(10000, 10000 - 2303, 2048, 4352) == 10000 - 2303);
    TEST_COND("swa: rewind 2304 restarts", muse_srv_swa_safe_keep(10000, 10000 - 2304, 2048, 4352) == 0);
    TEST_COND("swa: extending keeps all", muse_srv_swa_safe_keep(10000, 10000, 2048, 4352) == 10000);
    TEST_COND("swa: clamp", muse_srv_swa_safe_keep(50, 80, 2048, 4352) == 50);
    return TEST_REPORT();
}
