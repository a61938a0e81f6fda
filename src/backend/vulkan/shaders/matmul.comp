#version 450
// matmul.comp - MATMUL: y[r][i] = dot(W row i, x[r]) (* scale) (+ bias[i]) for a tile of up to 8
// batch rows per workgroup, f32 accumulation (the plain path: weights dequantized by dq8, no
// activation quantization). Workgroup (i, tile): 64 threads share the row's groups of 8, each
// dequantizes its groups once for all the tile's rows, then a tree sum in shared memory.
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // flags: 1 scale, 2 bias
    float scale;
} p;

shared float red[8][64];

void main() {
    const uint i = gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u;
    if (i >= p.ne1) return;
    const uint r0 = gl_WorkGroupID.y * 8u, t = gl_LocalInvocationID.x;
    const uint nr = min(8u, p.n_rows - r0);
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    F32 x = F32(p.x);
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    for (uint g = t; g < p.ne0 / 8u; g += 64u) {
        float v[8];
        dq8(w, tab, o, g, v);
        for (uint r = 0u; r < nr; r++) {
            uint xb = (r0 + r) * p.xs + g * 8u;
            float s = 0.0;
            for (uint j = 0u; j < 8u; j++) s += v[j] * x.v[xb + j];
            acc[r] += s;
        }
    }
    for (uint r = 0u; r < 8u; r++) red[r][t] = acc[r];
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (t < s)
            for (uint r = 0u; r < 8u; r++) red[r][t] += red[r][t + s];
        barrier();
    }
    if (t < nr) {
        float v = red[t][0];
        if ((p.flags & 1u) != 0u) v = v * p.scale;
        if ((p.flags & 2u) != 0u) v = v + F32(p.bias).v[i];
        F32(p.y).v[(r0 + t) * p.ys + i] = v;
    }
}
