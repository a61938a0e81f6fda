#version 450
// matmul_vec.comp - MATMUL for decode (1..8 token rows), the int8-dot variant of the types real
// files use most - Q4_K, Q6_K (the usual output head) and IQ2_XXS (WTYPE) - against Q8_K
// activations, the cpu's vec_dot_type for them (act_quant.comp PACK: codes, d per 256, sums per 16).
// The integer sums are the cpu's (every product and sum of a sub-block is exact in int32); only the
// float products and the order of the float sums differ, so it keeps the plain path's bound.
//
// Layout: 32 lanes per output row, 2 rows per workgroup of 64. A lane takes units of 32 weights
// (an eighth of a 256-block: Q4_K 16 bytes of nibbles with their two sub-block scales, Q6_K 8
// values of l of one 128-half, IQ2_XXS one 32-group), two per step with their loads issued
// together (memory-level parallelism), so consecutive lanes read consecutive bytes;
// 4x8-bit dot products (OpSDot) against the packed activation words of each token row. The lanes'
// partial sums are reduced with subgroupAdd where the subgroup is SG (a divisor of 32) wide, through
// shared memory across the subgroups of a row; SG 0: shared memory only.
#extension GL_EXT_spirv_intrinsics : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "tab_layout.h"

layout(constant_id = 0) const uint WTYPE = 12u;
layout(constant_id = 1) const uint SG = 0u;
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // xs: words per packed activation row
    float scale;
} p;

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);

const uint T_Q4_K = 12u, T_Q6_K = 14u, T_IQ2_XXS = 16u;
const uint BS = WTYPE == T_Q4_K ? 144u : WTYPE == T_Q6_K ? 210u : 66u;

shared float red[8][64];

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
    const uint t = gl_LocalInvocationID.x, lane = t & 31u;
    const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * 2u + (t >> 5);
    const bool valid = i < p.ne1;
    const uint nr = min(8u, p.n_rows);
    const uint nb = p.ne0 / 256u, n_units = nb * 8u;
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    U32 x = U32(p.x);
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    // two units per lane and step (u and u + 32; a lane without a second takes its first again with
    // weight 0): every weight load of both is issued before the first product
    for (uint u0 = lane; valid && u0 < n_units; u0 += 64u) {
        const bool two = u0 + 32u < n_units;
        const uint us[2] = uint[2](u0, two ? u0 + 32u : u0);
        const float keep[2] = float[2](1.0, two ? 1.0 : 0.0);
        if (WTYPE == T_Q4_K) {
            uint dmw[2], sc[2][3], q[2][4];
            for (uint s = 0u; s < 2u; s++) {
                const uint wq = (o + (us[s] >> 3) * BS) >> 2, k = us[s] & 7u;
                dmw[s] = w.v[wq];
                for (uint c = 0u; c < 3u; c++) sc[s][c] = w.v[wq + 1u + c];
                for (uint c = 0u; c < 4u; c++) q[s][c] = w.v[wq + 4u + 4u * k + c];
            }
            for (uint s = 0u; s < 2u; s++) {
                const uint b = us[s] >> 3, k = us[s] & 7u, j = k >> 1, h = k & 1u;
                const vec2 dm = unpackHalf2x16(dmw[s]) * keep[s];
                // get_scale_min_k4 of sub-blocks 2j and 2j + 1
                int scl[2], mn[2];
                for (uint c = 0u; c < 2u; c++) {
                    const uint jj = 2u * j + c;
                    uint a, m;
                    if (jj < 4u) {
                        a = byte_of(sc[s][jj >> 2], jj & 3u) & 63u;
                        m = byte_of(sc[s][(jj + 4u) >> 2], (jj + 4u) & 3u) & 63u;
                    } else {
                        const uint hi = byte_of(sc[s][(jj + 4u) >> 2], (jj + 4u) & 3u);
                        a = (hi & 15u) | ((byte_of(sc[s][(jj - 4u) >> 2], (jj - 4u) & 3u) >> 6) << 4);
                        m = (hi >> 4) | ((byte_of(sc[s][jj >> 2], jj & 3u) >> 6) << 4);
                    }
                    scl[c] = int(a);
                    mn[c] = int(m);
                }
                for (uint r = 0u; r < nr; r++) {
                    const uint xr = r * p.xs, xl = xr + 64u * b + 16u * j + 4u * h;
                    int sl = 0, sh = 0;
                    for (uint c = 0u; c < 4u; c++) {
                        sl += sdot4x8(q[s][c] & 0x0f0f0f0fu, x.v[xl + c], 0);
                        sh += sdot4x8((q[s][c] >> 4) & 0x0f0f0f0fu, x.v[xl + 8u + c], 0);
                    }
                    const uint bs = xr + p.ne0 / 4u + nb + 16u * b + 4u * j + h;
                    const int bl = int(x.v[bs]), bh = int(x.v[bs + 2u]);
                    const float dy = uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]);
                    acc[r] += dy * (dm.x * float(scl[0] * sl + scl[1] * sh) - dm.y * float(mn[0] * bl + mn[1] * bh));
                }
            }
        } else if (WTYPE == T_Q6_K) {
            uint qa[2][2], qb[2][2], qh[2][2];
            float d[2];
            for (uint s = 0u; s < 2u; s++) {
                const uint base = o + (us[s] >> 3) * BS, k = us[s] & 7u, n = k >> 2, lq = (k & 3u) * 8u;
                d[s] = rh(w, base + 208u) * keep[s];
                for (uint c = 0u; c < 2u; c++) {
                    qa[s][c] = ldw(w, base + 64u * n + lq + 4u * c);
                    qb[s][c] = ldw(w, base + 64u * n + 32u + lq + 4u * c);
                    qh[s][c] = ldw(w, base + 128u + 32u * n + lq + 4u * c);
                }
            }
            for (uint s = 0u; s < 2u; s++) {
                const uint base = o + (us[s] >> 3) * BS, b = us[s] >> 3, k = us[s] & 7u, n = k >> 2, lq = (k & 3u) * 8u;
                uint qq[4][2];
                for (uint c = 0u; c < 2u; c++) {
                    qq[0][c] = minus32((qa[s][c] & 0x0f0f0f0fu) | ((qh[s][c] << 4) & 0x30303030u));
                    qq[1][c] = minus32((qb[s][c] & 0x0f0f0f0fu) | ((qh[s][c] << 2) & 0x30303030u));
                    qq[2][c] = minus32(((qa[s][c] >> 4) & 0x0f0f0f0fu) | (qh[s][c] & 0x30303030u));
                    qq[3][c] = minus32(((qb[s][c] >> 4) & 0x0f0f0f0fu) | ((qh[s][c] >> 2) & 0x30303030u));
                }
                int scl[4];
                for (uint c = 0u; c < 4u; c++) scl[c] = rsb(w, base + 192u + 8u * n + 2u * c + (lq >> 4));
                for (uint r = 0u; r < nr; r++) {
                    const uint xr = r * p.xs, xl = xr + 64u * b + 32u * n + lq / 4u;
                    int sum = 0;
                    for (uint c = 0u; c < 4u; c++)
                        sum += scl[c] * (sdot4x8(qq[c][0], x.v[xl + 8u * c], 0) + sdot4x8(qq[c][1], x.v[xl + 8u * c + 1u], 0));
                    acc[r] += d[s] * uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]) * float(sum);
                }
            }
        } else { // IQ2_XXS: 4 grid indices, then 4 x 7 sign bits and the 4-bit scale
            uint a0[2], a1[2];
            float d[2];
            for (uint s = 0u; s < 2u; s++) {
                const uint base = o + (us[s] >> 3) * BS, k = us[s] & 7u;
                d[s] = rh(w, base) * keep[s];
                a0[s] = ldw(w, base + 2u + 8u * k);
                a1[s] = ldw(w, base + 6u + 8u * k);
            }
            for (uint s = 0u; s < 2u; s++) {
                const uint b = us[s] >> 3, k = us[s] & 7u;
                const int ls = int(2u * (a1[s] >> 28) + 1u);
                uint g[8];
                for (uint l = 0u; l < 4u; l++) {
                    const uint idx = byte_of(a0[s], l), sb = tab.v[TAB_KSIGNS + ((a1[s] >> (7u * l)) & 127u)];
                    const uint m0 = sign_mask(sb & 15u), m1 = sign_mask((sb >> 4) & 15u);
                    g[2u * l] = (tab.v[TAB_IQ2XXS + 2u * idx] ^ m0) + (m0 & 0x01010101u);
                    g[2u * l + 1u] = (tab.v[TAB_IQ2XXS + 2u * idx + 1u] ^ m1) + (m1 & 0x01010101u);
                }
                for (uint r = 0u; r < nr; r++) {
                    const uint xr = r * p.xs, xl = xr + 64u * b + 8u * k;
                    int sum = 0;
                    for (uint c = 0u; c < 8u; c++) sum += sdot4x8(g[c], x.v[xl + c], 0);
                    acc[r] += d[s] * uintBitsToFloat(x.v[xr + p.ne0 / 4u + b]) * float(ls * sum);
                }
            }
        }
    }
    // the row's 32 partial sums: subgroupAdd within SG lanes, shared memory across subgroups
    if (SG == 32u) {
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
                for (uint l = 0u; l < 32u; l += step) s += red[r][t + l];
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
