/* tab_layout.h - where each quant table lies in the Vulkan device's table buffer, in 32-bit words
 * (included by dequant.glsl and vk_device.c, which fills the buffer from kernels/quant_tables.c's
 * C tables when the device opens). 64-bit grid entries take two words (low, high). */
#define TAB_IQ2XXS 0     /* muse_iq2xxs_grid: 256 x 2 */
#define TAB_KSIGNS 512   /* muse_ksigns_iq2xs: 128 */
#define TAB_IQ4NL 640    /* muse_kvalues_iq4nl: 16, as int32 */
#define TAB_MXFP4 656    /* muse_kvalues_mxfp4: 16, as int32 */
#define TAB_IQ2XS 672    /* muse_iq2xs_grid: 512 x 2 */
#define TAB_IQ2S 1696    /* muse_iq2s_grid: 1024 x 2 */
#define TAB_IQ3XXS 3744  /* muse_iq3xxs_grid: 256 */
#define TAB_IQ3S 4000    /* muse_iq3s_grid: 512 */
#define TAB_IQ1S 4512    /* muse_iq1s_grid: 2048 x 2 */
#define TAB_WORDS 8608
