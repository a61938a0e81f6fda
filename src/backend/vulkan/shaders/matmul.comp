#version 450
// matmul.comp - MATMUL: y[r][i] = dot(W row i, x[r]) (* scale) (+ bias[i]) for a tile of up to 8
// batch rows per workgroup, f32 accumulation (the plain path: weights dequantized by dq8, no
// activation quantization). TPR (threads per output row, a specialization constant: 64 / TPR
// rows per workgroup) share a row's groups of 8; each thread dequantizes its groups once for all
// the tile's rows, then (TPR > 1) a tree sum in shared memory. TPR = 1 suits CPU drivers
// (lavapipe runs a workgroup as SIMD lanes and pays for every barrier), larger TPR GPUs.
#include "common.glsl"
#include "dequant.glsl"

layout(constant_id = 1) const uint TPR = 64u;
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // flags: 1 scale, 2 bias
    float scale;
} p;

shared float red[8][64];

void main() {
    const uint t = gl_LocalInvocationID.x, lane = t % TPR;
    const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * (64u / TPR) + t / TPR;
    const bool valid = i < p.ne1;
    const uint r0 = gl_WorkGroupID.y * 8u;
    const uint nr = min(8u, p.n_rows - r0);
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    F32 x = F32(p.x);
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    for (uint g = lane; valid && g < p.ne0 / 8u; g += TPR) {
        float v[8];
        dq8(w, tab, o, g, v);
        for (uint r = 0u; r < nr; r++) {
            uint xb = (r0 + r) * p.xs + g * 8u;
            float s = 0.0;
            for (uint j = 0u; j < 8u; j++) s += v[j] * x.v[xb + j];
            acc[r] += s;
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
