#version 450
// matmul_vec.comp - MATMUL for decode (1..8 token rows), the int8-dot variant of the types real
// files use most - Q4_K, Q6_K (the usual output head) and IQ2_XXS (WTYPE) - against Q8_K
// activations, the cpu's vec_dot_type for them (act_quant.comp PACK: codes, d per 256, sums per 16).
// The integer sums are the cpu's (every product and sum of a sub-block is exact in int32); only the
// float products and the order of the float sums differ, so it keeps the plain path's bound.
//
// Layout: LPR lanes per output row (32; 64 for matrices of fewer than 1024 rows, where a warp per
// row leaves the GPU waiting on memory latency), 256 / LPR rows per workgroup of 256. IQ2_XXS: the
// workgroup first copies the grid and the sign table into shared memory, where the lanes' scattered
// lookups are cheap. A lane takes a unit of 32 weights (an eighth of a 256-block: Q4_K 16 bytes of
// nibbles with their two sub-block scales, Q6_K 8 values of l of one 128-half, IQ2_XXS one
// 32-group), so consecutive lanes read consecutive bytes; 4x8-bit dot products (OpSDot) against
// the packed activation words of each token row. The lanes' partial sums are reduced with
// subgroupAdd where the subgroup is SG (a divisor of 32) wide, through shared memory across the
// subgroups of a row; SG 0: shared memory only.
#extension GL_EXT_spirv_intrinsics : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "tab_layout.h"

layout(constant_id = 0) const uint WTYPE = 12u;
layout(constant_id = 1) const uint C1 = 0u; // SG | 256 * (LPR == 64)
const uint SG = C1 & 255u;
const uint LPR = (C1 >> 8) != 0u ? 64u : 32u; // lanes per output row: 64 for short matrices (latency)
const uint RPW = 256u / LPR;                  // output rows per workgroup
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // xs: words per packed activation row
    float scale;
} p;

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);

const uint T_Q4_K = 12u, T_Q6_K = 14u, T_IQ2_XXS = 16u;
const uint BS = WTYPE == T_Q4_K ? 144u : WTYPE == T_Q6_K ? 210u : 66u;

// 16- and 8-byte views: the packed activation rows start at multiples of 16 bytes (act_quant pads
// the row stride to 4 words), Q4_K rows too (144-byte blocks; vk_run.c checks the address)
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U32x4 { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U32x2 { uvec2 v[]; };

shared float red[8][256];
shared uint s_grid[512], s_signs[128]; // IQ2_XXS: muse_iq2xxs_grid (2 words each), muse_ksigns_iq2xs

// the little-endian word at byte offset o (o even: Q6_K and IQ2_XXS blocks are 2-byte aligned)
uint ldw(U32 w, uint o) {
    const uint a = w.v[o >> 2];
    return (o & 2u) == 0u ? a : (a >> 16) | (w.v[(o >> 2) + 1u] << 16);
}
uint byte_of(uint word, uint k) { return (word >> (8u * k)) & 0xffu; }
// Q6_K: 6-bit codes (0..63, 4 to a word) minus 32, as 4 int8
uint minus32(uint q) {
    const uint t = q ^ 0x20202020u, m = t & 0x20202020u;
    return t | (m << 1) | (m << 2);
}
// 4 sign bits to 4 bytes of 0x00 / 0xff
uint sign_mask(uint n) { return ((n * 0x00204081u) & 0x01010101u) * 0xffu; }

void main() {
    const uint t = gl_LocalInvocationID.x, lane = t % LPR;
    const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * RPW + t / LPR;
    const bool valid = i < p.ne1;
    const uint nr = min(8u, p.n_rows);
    const uint nb = p.ne0 / 256u, n_units = nb * 8u;
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    U32 x = U32(p.x);
    if (WTYPE == T_IQ2_XXS) {
        for (uint k = t; k < 512u; k += 256u) s_grid[k] = tab.v[TAB_IQ2XXS + k];
        if (t < 128u) s_signs[t] = tab.v[TAB_KSIGNS + t];
        barrier();
    }
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    for (uint u = lane; valid && u < n_units; u += LPR) {
        const uint b = u >> 3, k = u & 7u, base = o + b * BS;
        if (WTYPE == T_Q4_K) {
            const uint j = k >> 1, h = k & 1u;
            const uvec4 hd = U32x4(p.w).v[(base >> 4)];       // d, dmin, the 12 scale bytes
            const uvec4 q = U32x4(p.w).v[(base >> 4) + 1u + k]; // 16 bytes of nibbles
            const vec2 dm = unpackHalf2x16(hd.x);
            int scl[2], mn[2]; // sub-blocks 2j and 2j + 1
            for (uint c = 0u; c < 2u; c++) {
                uint a, m;
                k4_scale_min(hd.yzw, 2u * j + c, a, m);
                scl[c] = int(a);
                mn[c] = int(m);
            }
            for (uint r = 0u; r < nr; r++) {
                const uint xr = r * p.xs, xl = xr + 64u * b + 16u * j + 4u * h;
                const uvec4 xlo = U32x4(p.x).v[xl >> 2], xhi = U32x4(p.x).v[(xl + 8u) >> 2];
                const int sl = sdot4x8(q.x & 0x0f0f0f0fu, xlo.x, 0) + sdot4x8(q.y & 0x0f0f0f0fu, xlo.y, 0) +
                               sdot4x8(q.z & 0x0f0f0f0fu, xlo.z, 0) + sdot4x8(q.w & 0x0f0f0f0fu, xlo.w, 0);
                const int sh = sdot4x8((q.x >> 4) & 0x0f0f0f0fu, xhi.x, 0) + sdot4x8((q.y >> 4) & 0x0f0f0f0fu, xhi.y, 0) +
                               sdot4x8((q.z >> 4) & 0x0f0f0f0fu, xhi.z, 0) + sdot4x8((q.w >> 4) & 0x0f0f0f0fu, xhi.w, 0);
                const uint bs = xr + p.ne0 / 4u + nb + 16u * b + 4u * j + h;
                const int bl = int(x.v[bs]), bh = int(x.v[bs + 2u]);
                const float dy = uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]);
                acc[r] += dy * (dm.x * float(scl[0] * sl + scl[1] * sh) - dm.y * float(mn[0] * bl + mn[1] * bh));
            }
        } else if (WTYPE == T_Q6_K) {
            const uint n = k >> 2, lq = (k & 3u) * 8u;
            const float d = rh(w, base + 208u);
            uint qa[2], qb[2], qh[2];
            for (uint c = 0u; c < 2u; c++) {
                qa[c] = ldw(w, base + 64u * n + lq + 4u * c);
                qb[c] = ldw(w, base + 64u * n + 32u + lq + 4u * c);
                qh[c] = ldw(w, base + 128u + 32u * n + lq + 4u * c);
            }
            uint q[4][2];
            for (uint c = 0u; c < 2u; c++) {
                q[0][c] = minus32((qa[c] & 0x0f0f0f0fu) | ((qh[c] << 4) & 0x30303030u));
                q[1][c] = minus32((qb[c] & 0x0f0f0f0fu) | ((qh[c] << 2) & 0x30303030u));
                q[2][c] = minus32(((qa[c] >> 4) & 0x0f0f0f0fu) | (qh[c] & 0x30303030u));
                q[3][c] = minus32(((qb[c] >> 4) & 0x0f0f0f0fu) | ((qh[c] >> 2) & 0x30303030u));
            }
            int sc[4];
            for (uint c = 0u; c < 4u; c++) sc[c] = rsb(w, base + 192u + 8u * n + 2u * c + (lq >> 4));
            for (uint r = 0u; r < nr; r++) {
                const uint xr = r * p.xs, xl = xr + 64u * b + 32u * n + lq / 4u;
                int s = 0;
                for (uint c = 0u; c < 4u; c++) {
                    const uvec2 xv = U32x2(p.x).v[(xl + 8u * c) >> 1];
                    s += sc[c] * (sdot4x8(q[c][0], xv.x, 0) + sdot4x8(q[c][1], xv.y, 0));
                }
                acc[r] += d * uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]) * float(s);
            }
        } else { // IQ2_XXS: 4 grid indices, then 4 x 7 sign bits and the 4-bit scale
            const float d = rh(w, base);
            const uint a0 = ldw(w, base + 2u + 8u * k), a1 = ldw(w, base + 6u + 8u * k);
            const int ls = int(2u * (a1 >> 28) + 1u);
            uint g[8];
            for (uint l = 0u; l < 4u; l++) {
                const uint idx = byte_of(a0, l), sb = s_signs[(a1 >> (7u * l)) & 127u];
                const uint m0 = sign_mask(sb & 15u), m1 = sign_mask((sb >> 4) & 15u);
                g[2u * l] = (s_grid[2u * idx] ^ m0) + (m0 & 0x01010101u);
                g[2u * l + 1u] = (s_grid[2u * idx + 1u] ^ m1) + (m1 & 0x01010101u);
            }
            for (uint r = 0u; r < nr; r++) {
                const uint xr = r * p.xs, xl = xr + 64u * b + 8u * k;
                int s = 0;
                const uvec4 x0 = U32x4(p.x).v[xl >> 2], x1 = U32x4(p.x).v[(xl >> 2) + 1u];
                s += sdot4x8(g[0], x0.x, 0) + sdot4x8(g[1], x0.y, 0) + sdot4x8(g[2], x0.z, 0) + sdot4x8(g[3], x0.w, 0) +
                     sdot4x8(g[4], x1.x, 0) + sdot4x8(g[5], x1.y, 0) + sdot4x8(g[6], x1.z, 0) + sdot4x8(g[7], x1.w, 0);
                acc[r] += d * uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]) * float(ls * s);
            }
        }
    }
    // the row's LPR partial sums: subgroupAdd within SG lanes, shared memory across the subgroups
    if (SG == 32u && LPR == 32u) {
        for (uint r = 0u; r < 8u; r++) acc[r] = subgroupAdd(acc[r]);
    } else {
        if (SG > 1u)
            for (uint r = 0u; r < 8u; r++) acc[r] = subgroupAdd(acc[r]);
        const uint step = SG > 1u ? SG : 1u;
        for (uint r = 0u; r < 8u; r++) red[r][t] = acc[r];
        barrier();
        if (lane == 0u)
            for (uint r = 0u; r < 8u; r++) {
                float s = 0.0;
                for (uint l = 0u; l < LPR; l += step) s += red[r][t + l];
                acc[r] = s;
            }
    }
    if (!valid || lane != 0u) return;
    for (uint r = 0u; r < nr; r++) {
        float v = WTYPE == T_IQ2_XXS ? acc[r] * 0.125 : acc[r];
        if ((p.flags & 1u) != 0u) v = v * p.scale;
        if ((p.flags & 2u) != 0u) v = v + F32(p.bias).v[i];
        F32(p.y).v[r * p.ys + i] = v;
    }
}
