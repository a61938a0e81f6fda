#version 450
// act_quant.comp - the activations as the cpu's matmul sees them: each row of x rounded to the
// weight type's activation format (ATYPE = muse's type id of its vec_dot_type: F16, BF16, Q8_0,
// Q8_1 or Q8_K) with the arithmetic of the quantizers the cpu's matmul runs (Q8_0 / Q8_1: ggml's
// x86 one, muse_from_float_q8_0_x86 in kernels/quant_legacy.c: 127 / amax, half to even; Q8_K:
// quant_k.c's reference), then widened back to f32 into y (row stride ne0). matmul.comp then multiplies
// dequantized weights by these values: the products the cpu's integer dot forms, in f32, so the
// two devices differ by float rounding only (docs/vulkan.md "Tolerances"). A workgroup per row.
#include "common.glsl"

layout(constant_id = 0) const uint ATYPE = 8u;
// PACK (Q8_0 only, for matmul_dp4a.comp): row r at word r * (ne0 / 4 + ne0 / 32): the codes, 4 int8
// to a word, then the blocks' f16-rounded scales as floats
layout(constant_id = 1) const uint PACK = 0u;
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 x, y;
    uint ne0, xs;
} p;

const uint A_F16 = 1u, A_Q8_0 = 8u, A_Q8_1 = 9u, A_Q8_K = 15u, A_BF16 = 30u;

// q8_code(nearbyintf(v)): half to even, 0 outside [-128, 127] or for NaN
float even_code(float v) {
    float r = roundEven(v);
    return r >= -128.0 && r <= 127.0 ? r : 0.0;
}

void main() {
    const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    F32 x = F32(p.x), y = F32(p.y);
    const uint xb = r * p.xs, yb = r * p.ne0;
    if (ATYPE == A_F16) {
        for (uint c = t; c < p.ne0; c += 64u) y.v[yb + c] = unpackHalf2x16(f32_to_f16(x.v[xb + c])).x;
    } else if (ATYPE == A_BF16) { // muse_fp32_to_bf16: round to nearest even, NaN made quiet
        for (uint c = t; c < p.ne0; c += 64u) {
            uint u = floatBitsToUint(x.v[xb + c]);
            uint h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            y.v[yb + c] = uintBitsToFloat(h << 16);
        }
    } else if (ATYPE == A_Q8_0 || ATYPE == A_Q8_1) { // d = amax / 127, stored as f16; id = 127 / amax
        for (uint b = t; b < p.ne0 / 32u; b += 64u) {
            float amax = 0.0;
            for (uint j = 0u; j < 32u; j++) {
                float a = abs(x.v[xb + 32u * b + j]);
                amax = a > amax ? a : amax;
            }
            float d = amax / 127.0;
            float id = amax != 0.0 ? 127.0 / amax : 0.0;
            float dh = unpackHalf2x16(f32_to_f16(d)).x;
            if (PACK != 0u) {
                U32 yp = U32(p.y);
                const uint pb = r * (p.ne0 / 4u + p.ne0 / 32u);
                for (uint k = 0u; k < 8u; k++) {
                    uint q = 0u;
                    for (uint j = 0u; j < 4u; j++)
                        q |= (uint(int(even_code(x.v[xb + 32u * b + 4u * k + j] * id))) & 0xffu) << (8u * j);
                    yp.v[pb + 8u * b + k] = q;
                }
                yp.v[pb + p.ne0 / 4u + b] = floatBitsToUint(dh);
                continue;
            }
            for (uint j = 0u; j < 32u; j++) y.v[yb + 32u * b + j] = even_code(x.v[xb + 32u * b + j] * id) * dh;
        }
    } else if (ATYPE == A_Q8_K) { // iscale = -127 / (the first value of largest |x|), nearest even, d = 1 / iscale
        for (uint b = t; b < p.ne0 / 256u; b += 64u) {
            float amax = 0.0, mx = 0.0;
            for (uint j = 0u; j < 256u; j++) {
                float v = x.v[xb + 256u * b + j];
                if (abs(v) > amax) {
                    amax = abs(v);
                    mx = v;
                }
            }
            float iscale = amax != 0.0 ? -127.0 / mx : 0.0, d = amax != 0.0 ? 1.0 / iscale : 0.0;
            for (uint j = 0u; j < 256u; j++) {
                float q = min(roundEven(iscale * x.v[xb + 256u * b + j]), 127.0);
                y.v[yb + 256u * b + j] = q * d;
            }
        }
    }
}
