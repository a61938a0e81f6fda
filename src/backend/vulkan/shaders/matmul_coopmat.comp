#version 450
// matmul_coopmat.comp - MATMUL, the cooperative-matrix variant for prefill (docs/vulkan.md "Fast
// variants"): a workgroup is one subgroup of 32 and computes a 16 x 16 tile of y (16 output rows i
// x 16 batch rows r) as a sum over K in steps of 16 of W[16 i x 16 k] * X^T[16 k x 16 r], f16 x f16
// -> f32 (GL_NV_cooperative_matrix: this glslang has no GL_KHR_cooperative_matrix). Each step the
// threads dequantize the weight tile (dq8, any type) and take the activations to f16 into shared
// memory, which the matrices load from. Chosen when the device has VK_NV_cooperative_matrix with a
// 16x16x16 f16/f32 subgroup shape and the run has 16 rows or more; lavapipe has none, so it runs
// on a GPU only (bench/device.sh).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 32) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // flags: 1 scale, 2 bias
    float scale;
} p;

shared float16_t sw[256]; // W tile, row-major [i][k]
shared float16_t sx[256]; // X tile, row-major [r][k] (loaded as X^T, column-major)
shared float sy[256];     // the result tile, row-major [i][r]

void main() {
    const uint t = gl_LocalInvocationID.x;
    const uint i0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * 16u, r0 = gl_WorkGroupID.y * 16u;
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    F32 x = F32(p.x);
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    const uint row = t >> 1, half_ = t & 1u; // each thread: 8 values of one row of each tile
    for (uint k0 = 0u; k0 < p.ne0; k0 += 16u) {
        float v[8];
        const uint i = i0 + row, r = r0 + row;
        if (i < p.ne1) {
            dq8(w, tab, i * p.row_size, (k0 >> 3) + half_, v);
        } else {
            for (uint j = 0u; j < 8u; j++) v[j] = 0.0;
        }
        for (uint j = 0u; j < 8u; j++) sw[row * 16u + 8u * half_ + j] = float16_t(v[j]);
        for (uint j = 0u; j < 8u; j++)
            sx[row * 16u + 8u * half_ + j] = float16_t(r < p.n_rows ? x.v[r * p.xs + k0 + 8u * half_ + j] : 0.0);
        barrier();
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a, b;
        coopMatLoadNV(a, sw, 0, 16, false);
        coopMatLoadNV(b, sx, 0, 16, true);
        acc = coopMatMulAddNV(a, b, acc);
        barrier();
    }
    coopMatStoreNV(acc, sy, 0, 16, false);
    barrier();
    for (uint e = t; e < 256u; e += 32u) {
        const uint i = i0 + e / 16u, r = r0 + e % 16u;
        if (i >= p.ne1 || r >= p.n_rows) continue;
        float v = sy[e];
        if ((p.flags & 1u) != 0u) v = v * p.scale;
        if ((p.flags & 2u) != 0u) v = v + F32(p.bias).v[i];
        F32(p.y).v[r * p.ys + i] = v;
    }
}
