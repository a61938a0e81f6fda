#version 450
// rms_norm.comp - RMS_NORM: vector v (row v / per_row, head v % per_row) y = x * (1/sqrt(mean(x^2)
// + eps)), then * w. The sum of squares is a tree of f32 partial sums (ggml sums in double in
// order: the stated bound of docs/vulkan.md). flags: 1 weight, 2 rows through the run's out_rows.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    uvec2 x, y, w, rows;
    uint n, per_row, xs, ys, flags, n_vec;
    float eps;
} p;

const uint MAXE = 32u; // values per thread held in registers (vectors up to 8192)
shared float red[256];

void main() {
    const uint v = gl_WorkGroupID.x + gl_WorkGroupID.y * 32768u, t = gl_LocalInvocationID.x;
    if (v >= p.n_vec) return;
    const uint r = v / p.per_row, h = v % p.per_row;
    const uint rs = (p.flags & 2u) != 0u ? uint(I32(p.rows).v[r]) : r;
    F32 x = F32(p.x);
    F32 y = F32(p.y);
    const uint xb = rs * p.xs + h * p.n, yb = r * p.ys + h * p.n;
    // a vector of up to 256 * MAXE values is read once, all of a thread's loads issued together
    // (a loop of dependent L2 round trips took 11.5 us per call on the H200), and kept for the
    // output; the sum of squares is the same either way (each thread in index order, then the tree)
    const bool held = p.n <= 256u * MAXE;
    float e[MAXE], wt[MAXE];
    float s = 0.0;
    if (held) { // the norm weights too, with the values: every load of the call in flight at once
        const bool has_w = (p.flags & 1u) != 0u;
        for (uint k = 0u; k < MAXE; k++) {
            const uint i = t + 256u * k;
            e[k] = i < p.n ? x.v[xb + i] : 0.0;
            wt[k] = has_w && i < p.n ? F32(p.w).v[i] : 1.0;
        }
        for (uint k = 0u; k < MAXE; k++) s += e[k] * e[k];
    } else {
        for (uint i = t; i < p.n; i += 256u) s += x.v[xb + i] * x.v[xb + i];
    }
    red[t] = s;
    barrier();
    for (uint k = 128u; k > 0u; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        barrier();
    }
    const float mean = red[0] / float(p.n);
    const float sc = div_rn(1.0, sqrt(mean + p.eps));
    barrier(); // every thread read red[0] before x may be overwritten (y == x)
    if (held) {
        for (uint k = 0u; k < MAXE; k++) {
            const uint i = t + 256u * k;
            float o = e[k] * sc;
            if ((p.flags & 1u) != 0u) o = o * wt[k];
            if (i < p.n) y.v[yb + i] = o;
        }
    } else {
        for (uint i = t; i < p.n; i += 256u) {
            float o = x.v[xb + i] * sc;
            if ((p.flags & 1u) != 0u) o = o * F32(p.w).v[i];
            y.v[yb + i] = o;
        }
    }
}
