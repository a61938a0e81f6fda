/* The type layout table against gguf-and-quants.md 2.1. */
#include <string.h>

#include "gguf/tensor_type.h"
#include "test.h"

int main(void) {
    static const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 42, 100, 1000};
    for (size_t i = 0; i < sizeof(removed) / sizeof(removed[0]); i++)
        TEST_CONDF(muse_type_layout_get((uint32_t)removed[i]) == NULL, "id %d rejected", removed[i]);
    int known = 0;
    for (uint32_t i = 0; i < MUSE_TYPE_COUNT; i++) known += muse_type_layout_get(i) != NULL;
    TEST_CONDF(known == 34, "34 standard types, got %d", known);
    TEST_COND("q4_k layout", muse_type_layout_get(12)->block_size == 256 && muse_type_layout_get(12)->type_size == 144);
    TEST_COND("q8_1 is 36 bytes", muse_type_layout_get(9)->type_size == 36);
    TEST_COND("nvfp4 block 64", muse_type_layout_get(40)->block_size == 64);
    TEST_COND("name lookup", muse_type_from_name("IQ2_XXS") == 16 && muse_type_from_name("q4_2") == -1);
    TEST_COND("row size", muse_type_row_size(MUSE_TYPE_Q4_K, 512) == 288);
    TEST_COND("bpw", muse_type_bpw(MUSE_TYPE_IQ2_XXS) == 2.0625);
    return TEST_REPORT();
}
