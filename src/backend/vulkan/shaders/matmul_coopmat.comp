#version 450
// matmul_coopmat.comp - MATMUL, the cooperative-matrix variant for prefill (docs/vulkan.md "Fast
// variants"): a workgroup of 4 subgroups of 32 computes a 64 x 64 tile of y (64 output rows i x 64
// batch rows r) as a sum over K in steps of 32; each subgroup owns a 32 x 32 quarter, 2 x 2
// accumulators of 16 x 16, f16 x f16 -> f32 (GL_NV_cooperative_matrix: this glslang has no
// GL_KHR_cooperative_matrix). Each step the 128 threads dequantize the 64 x 32 weight tile (dq8, any
// type: 16 weights each) and take the 64 x 32 activations (rounded as the cpu does, act_quant.comp)
// to f16 in shared memory; each subgroup then runs 8 16x16x16 products. A weight is dequantized
// once per 64 batch rows. Rows of shared memory are padded to 40 halves (80 bytes). Chosen when the
// device has VK_NV_cooperative_matrix with a 16x16x16 f16/f32 subgroup shape, the run has 16 rows or
// more and K is a multiple of 32; lavapipe has none, so it runs on a GPU only (bench/device.sh).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 128) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // flags: 1 scale, 2 bias
    float scale;
} p;

const uint LD = 40u;              // a shared row: 32 halves + 8 of padding
shared float16_t sw[64 * LD];     // W tile, row-major [i][k]
shared float16_t sx[64 * LD];     // X tile, row-major [r][k] (loaded as X^T, column-major)
shared float sy[64 * 64];         // the result tile, row-major [i][r]

void main() {
    const uint t = gl_LocalInvocationID.x, sg = t >> 5;
    const uint i0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * 64u, r0 = gl_WorkGroupID.y * 64u;
    const uint si = (sg >> 1) * 32u, sr = (sg & 1u) * 32u; // this subgroup's quarter
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    F32 x = F32(p.x);
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
    for (uint a = 0u; a < 2u; a++)
        for (uint b = 0u; b < 2u; b++) acc[a][b] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    const uint row = t >> 1, half_ = t & 1u; // each thread: 16 values of one row of each tile
    const uint i = i0 + row, r = r0 + row;
    for (uint k0 = 0u; k0 < p.ne0; k0 += 32u) {
        for (uint g = 0u; g < 2u; g++) {
            float v[8];
            if (i < p.ne1) {
                dq8(w, tab, i * p.row_size, (k0 >> 3) + 2u * half_ + g, v);
            } else {
                for (uint j = 0u; j < 8u; j++) v[j] = 0.0;
            }
            for (uint j = 0u; j < 8u; j++) sw[row * LD + 16u * half_ + 8u * g + j] = float16_t(v[j]);
        }
        for (uint j = 0u; j < 16u; j++)
            sx[row * LD + 16u * half_ + j] = float16_t(r < p.n_rows ? x.v[r * p.xs + k0 + 16u * half_ + j] : 0.0);
        barrier();
        for (uint kk = 0u; kk < 32u; kk += 16u) {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> A[2], B[2];
            for (uint a = 0u; a < 2u; a++) coopMatLoadNV(A[a], sw, (si + 16u * a) * LD + kk, LD, false);
            for (uint b = 0u; b < 2u; b++) coopMatLoadNV(B[b], sx, (sr + 16u * b) * LD + kk, LD, true);
            for (uint a = 0u; a < 2u; a++)
                for (uint b = 0u; b < 2u; b++) acc[a][b] = coopMatMulAddNV(A[a], B[b], acc[a][b]);
        }
        barrier();
    }
    for (uint a = 0u; a < 2u; a++)
        for (uint b = 0u; b < 2u; b++) coopMatStoreNV(acc[a][b], sy, (si + 16u * a) * 64u + sr + 16u * b, 64u, false);
    barrier();
    for (uint e = t; e < 64u * 64u; e += 128u) {
        const uint oi = i0 + e / 64u, orow = r0 + e % 64u;
        if (oi >= p.ne1 || orow >= p.n_rows) continue;
        float v = sy[e];
        if ((p.flags & 1u) != 0u) v = v * p.scale;
        if ((p.flags & 2u) != 0u) v = v + F32(p.bias).v[oi];
        F32(p.y).v[orow * p.ys + oi] = v;
    }
}
