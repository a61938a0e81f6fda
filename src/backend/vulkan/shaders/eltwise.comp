#version 450
// eltwise.comp - the elementwise ops over rows of n floats, by OP (a specialization constant):
//   0 SWIGLU  y = silu(y) * x        (silu(g) = g / (1 + exp(-g)))
//   1 ADD     y = y + x
//   2 LOGITS  y = y * scale, then softcap * tanh(y * (1 / softcap)) when softcap != 0
//   3 COPY    y = x
#include "common.glsl"

layout(constant_id = 0) const uint OP = 0u;
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 y, x;
    uint n, ys, xs, n_rows;
    float scale, softcap, inv_cap;
} p;

float tanh_(float a) { // tanh without exp overflow
    const float e = exp(-2.0 * abs(a));
    const float t = (1.0 - e) / (1.0 + e);
    return a < 0.0 ? -t : t;
}

void main() {
    const uint c = gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * 32768u;
    if (c >= p.n || r >= p.n_rows) return;
    F32 y = F32(p.y);
    const uint yi = r * p.ys + c;
    if (OP == 0u) {
        const float g = y.v[yi];
        y.v[yi] = g / (1.0 + exp(-g)) * F32(p.x).v[r * p.xs + c];
    } else if (OP == 1u) {
        y.v[yi] = y.v[yi] + F32(p.x).v[r * p.xs + c];
    } else if (OP == 2u) {
        float v = y.v[yi] * p.scale;
        if (p.softcap != 0.0) v = tanh_(v * p.inv_cap) * p.softcap;
        y.v[yi] = v;
    } else {
        y.v[yi] = F32(p.x).v[r * p.xs + c];
    }
}
