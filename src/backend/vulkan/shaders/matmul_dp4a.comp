#version 450
// matmul_dp4a.comp - MATMUL, the int8-dot variant for Q8_0 and Q4_0 weights (WTYPE): the
// activations come packed from act_quant.comp (PACK: per row ne0 int8 codes in words, then ne0 / 32
// f16-rounded scales as floats; ggml's x86 Q8_0 quantizer), the weights' codes are packed 4 to a
// word (Q4_0: q - 8) and each 32-block's integer sum is 8 packed 4x8-bit dot products (OpSDot of
// SPV_KHR_integer_dot_product, through GL_EXT_spirv_intrinsics: this glslang has no
// GL_EXT_integer_dot_product), times d_w * d_a: the cpu's integer block sums exactly. Layout as
// matmul.comp, with a 32-block per step. Chosen when the device has shaderIntegerDotProduct (a GPU;
// MUSE_VK_VARIANT=dp4a forces it).
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"

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

// word k (0..7) of the block's 32 codes, 4 int8 packed
uint wcodes(U32 w, uint b, uint k) {
    if (WTYPE == 8u) return ru32(w, b + 2u + 4u * k); // Q8_0: the int8 codes as they are
    uint q = 0u;                                     // Q4_0: nibble - 8
    for (uint j = 0u; j < 4u; j++) {
        uint e = 4u * k + j;
        uint c = e < 16u ? rb(w, b + 2u + e) & 15u : rb(w, b + 2u + e - 16u) >> 4;
        q |= ((c - 8u) & 0xffu) << (8u * j);
    }
    return q;
}

void main() {
    const uint t = gl_LocalInvocationID.x, lane = t % TPR;
    const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * (64u / TPR) + t / TPR;
    const bool valid = i < p.ne1;
    const uint r0 = gl_WorkGroupID.y * 8u;
    const uint nr = min(8u, p.n_rows - r0);
    const uint bs = WTYPE == 8u ? 34u : 18u, nb = p.ne0 / 32u;
    U32 w = U32(p.w);
    U32 x = U32(p.x);
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    for (uint b = lane; valid && b < nb; b += TPR) {
        const uint wb = o + b * bs;
        const float dw = rh(w, wb);
        uint q[8];
        for (uint k = 0u; k < 8u; k++) q[k] = wcodes(w, wb, k);
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
