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
// PACK: the packed rows of the int8-dot matmuls (matmul_dp4a.comp, matmul_vec.comp), row r at word
// r * xs: Q8_0: the codes, 4 int8 to a word, then the blocks' f16-rounded scales as floats (xs =
// ne0 / 4 + ne0 / 32); Q8_K: the codes, then the blocks' d as floats, then the sums of each 16
// codes (Q8_K's bsums) as ints (xs = ne0 / 4 + ne0 / 256 + ne0 / 16, rounded up to a multiple of
// 4 words: matmul_vec.comp reads the codes 16 bytes at a time).
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

shared float s_amax[64], s_mx[64];
shared uint s_ix[64];
shared int s_sum[64];

// Dispatch (x, rows): F16 / BF16: 64 values per workgroup; Q8_0 / Q8_1: 64 blocks of 32 per
// workgroup, a thread each; Q8_K: a 256-block per workgroup, 4 values per thread.
void main() {
    const uint r = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    F32 x = F32(p.x), y = F32(p.y);
    const uint xb = r * p.xs, yb = r * p.ne0;
    if (ATYPE == A_F16) {
        const uint c = gl_WorkGroupID.x * 64u + t;
        if (c < p.ne0) y.v[yb + c] = unpackHalf2x16(f32_to_f16(x.v[xb + c])).x;
    } else if (ATYPE == A_BF16) { // muse_fp32_to_bf16: round to nearest even, NaN made quiet
        const uint c = gl_WorkGroupID.x * 64u + t;
        if (c < p.ne0) {
            uint u = floatBitsToUint(x.v[xb + c]);
            uint h = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            y.v[yb + c] = uintBitsToFloat(h << 16);
        }
    } else if (ATYPE == A_Q8_0 || ATYPE == A_Q8_1) { // d = amax / 127, stored as f16; id = 127 / amax
        const uint b = gl_WorkGroupID.x * 64u + t;
        if (b >= p.ne0 / 32u) return;
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) {
            float a = abs(x.v[xb + 32u * b + j]);
            amax = a > amax ? a : amax;
        }
        float d = div_rn(amax, 127.0);
        float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
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
            return;
        }
        for (uint j = 0u; j < 32u; j++) y.v[yb + 32u * b + j] = even_code(x.v[xb + 32u * b + j] * id) * dh;
    } else if (ATYPE == A_Q8_K) { // iscale = -127 / (the first value of largest |x|), nearest even, d = 1 / iscale
        const uint b = gl_WorkGroupID.x, e = xb + 256u * b + 4u * t;
        float amax = 0.0, mx = 0.0;
        for (uint j = 0u; j < 4u; j++) { // the first of the thread's largest
            float v = x.v[e + j];
            if (abs(v) > amax) {
                amax = abs(v);
                mx = v;
            }
        }
        s_amax[t] = amax;
        s_mx[t] = mx;
        s_ix[t] = t;
        barrier();
        for (uint k = 32u; k > 0u; k >>= 1) { // the largest, the lowest index among equals
            if (t < k && (s_amax[t + k] > s_amax[t] || (s_amax[t + k] == s_amax[t] && s_ix[t + k] < s_ix[t]))) {
                s_amax[t] = s_amax[t + k];
                s_mx[t] = s_mx[t + k];
                s_ix[t] = s_ix[t + k];
            }
            barrier();
        }
        amax = s_amax[0];
        mx = s_mx[0];
        float iscale = amax != 0.0 ? div_rn(-127.0, mx) : 0.0, d = amax != 0.0 ? div_rn(1.0, iscale) : 0.0;
        float q[4];
        for (uint j = 0u; j < 4u; j++) q[j] = min(roundEven(iscale * x.v[e + j]), 127.0);
        if (PACK == 0u) {
            for (uint j = 0u; j < 4u; j++) y.v[yb + 256u * b + 4u * t + j] = q[j] * d;
            return;
        }
        U32 yp = U32(p.y);
        const uint pb = r * ((p.ne0 / 4u + p.ne0 / 256u + p.ne0 / 16u + 3u) & ~3u); // rows at 16 bytes
        uint w = 0u;
        for (uint j = 0u; j < 4u; j++) w |= (uint(int(q[j])) & 0xffu) << (8u * j);
        yp.v[pb + 64u * b + t] = w;
        if (t == 0u) yp.v[pb + p.ne0 / 4u + b] = floatBitsToUint(d);
        barrier(); // s_sum after every thread's reads of the reduction
        s_sum[t] = int(q[0] + q[1] + q[2] + q[3]);
        barrier();
        if ((t & 3u) == 0u)
            yp.v[pb + p.ne0 / 4u + p.ne0 / 256u + 16u * b + t / 4u] = uint(s_sum[t] + s_sum[t + 1u] + s_sum[t + 2u] + s_sum[t + 3u]);
    }
}
