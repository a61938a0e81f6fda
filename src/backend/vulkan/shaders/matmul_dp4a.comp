#version 450
// matmul_dp4a.comp - MATMUL, the int8-dot variant for the 32-element types whose values are an
// int8 code times one scale per block - Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 (WTYPE): the
// activations come packed from act_quant.comp (PACK: per row ne0 int8 codes in words, then ne0 / 32
// f16-rounded scales as floats; ggml's x86 Q8_0 quantizer), the weights' codes are packed 4 to a
// word (Q4_0: q - 8; Q5_0: q - 16; IQ4_NL / MXFP4: the codebook's int8 value) and each 32-block's integer sum is 8 packed 4x8-bit dot products (OpSDot of
// SPV_KHR_integer_dot_product, through GL_EXT_spirv_intrinsics: this glslang has no
// GL_EXT_integer_dot_product), times d_w * d_a: the cpu's integer block sums exactly. Layout as
// matmul.comp, with a 32-block per step. Chosen when the device has shaderIntegerDotProduct (a GPU;
// MUSE_VK_VARIANT=dp4a forces it).
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"
#include "tab_layout.h"

layout(constant_id = 0) const uint WTYPE = 8u;
layout(constant_id = 1) const uint TPR = 64u;
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // xs: words per packed activation row
    float scale;
} p;

// OpSDot (4450) with PackedVectorFormat4x8Bit (0): the signed dot product of two words of 4 int8
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);

shared float red[8][64];

const uint T_Q4_0 = 2u, T_Q5_0 = 6u, T_Q8_0 = 8u, T_IQ4_NL = 20u, T_MXFP4 = 39u;
const uint BS = WTYPE == T_Q8_0 ? 34u : WTYPE == T_Q5_0 ? 22u : WTYPE == T_MXFP4 ? 17u : 18u; // block bytes

// the block's scale: f16 d, or MXFP4's E8M0 "half" (muse_e8m0_half)
float wscale(U32 w, uint b) {
    if (WTYPE != T_MXFP4) return rh(w, b);
    uint e = rb(w, b);
    return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
}

// word k (0..7) of the block's 32 codes, 4 int8 packed
uint wcodes(U32 w, U32 tab, uint b, uint k) {
    if (WTYPE == T_Q8_0) return ru32(w, b + 2u + 4u * k); // the int8 codes as they are
    const uint qs = b + (WTYPE == T_Q5_0 ? 6u : WTYPE == T_MXFP4 ? 1u : 2u);
    const uint qh = WTYPE == T_Q5_0 ? ru32(w, b + 2u) : 0u;
    uint q = 0u;
    for (uint j = 0u; j < 4u; j++) {
        uint e = 4u * k + j;
        uint c = e < 16u ? rb(w, qs + e) & 15u : rb(w, qs + e - 16u) >> 4;
        int v;
        if (WTYPE == T_Q4_0) v = int(c) - 8;
        else if (WTYPE == T_Q5_0) v = int(c | (((qh >> e) & 1u) << 4)) - 16;
        else v = int(tab.v[(WTYPE == T_IQ4_NL ? TAB_IQ4NL : TAB_MXFP4) + c]);
        q |= (uint(v) & 0xffu) << (8u * j);
    }
    return q;
}

void main() {
    const uint t = gl_LocalInvocationID.x, lane = t % TPR;
    const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * (64u / TPR) + t / TPR;
    const bool valid = i < p.ne1;
    const uint r0 = gl_WorkGroupID.y * 8u;
    const uint nr = min(8u, p.n_rows - r0);
    const uint nb = p.ne0 / 32u;
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    U32 x = U32(p.x);
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    for (uint b = lane; valid && b < nb; b += TPR) {
        const uint wb = o + b * BS;
        const float dw = wscale(w, wb);
        uint q[8];
        for (uint k = 0u; k < 8u; k++) q[k] = wcodes(w, tab, wb, k);
        for (uint r = 0u; r < nr; r++) {
            const uint xr = (r0 + r) * p.xs;
            int sumi = 0;
            for (uint k = 0u; k < 8u; k++) sumi += sdot4x8(q[k], x.v[xr + 8u * b + k], 0);
            acc[r] += float(sumi) * (dw * uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]));
        }
    }
    if (TPR > 1u) {
        for (uint r = 0u; r < 8u; r++) red[r][t] = acc[r];
        barrier();
        for (uint s = TPR / 2u; s > 0u; s >>= 1) {
            if (lane < s)
                for (uint r = 0u; r < 8u; r++) red[r][t] += red[r][t + s];
            barrier();
        }
        for (uint r = 0u; r < 8u; r++) acc[r] = red[r][t];
    }
    if (!valid || lane != 0u) return;
    for (uint r = 0u; r < nr; r++) {
        float v = acc[r];
        if ((p.flags & 1u) != 0u) v = v * p.scale;
        if ((p.flags & 2u) != 0u) v = v + F32(p.bias).v[i];
        F32(p.y).v[(r0 + r) * p.ys + i] = v;
    }
}
