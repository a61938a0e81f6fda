#version 450
// rope.comp - ROPE: rotate the first n_rot dims of head h of row r by the row's cached angles
// (cos row r of c, sin row r of s): NORM adjacent pairs, NEOX halves.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 x, c, s;
    uint xs, hd, per_row, n_rot, cs, neox, n_vec;
} p;

void main() {
    const uint v = gl_WorkGroupID.x + gl_WorkGroupID.y * 32768u, t = gl_LocalInvocationID.x;
    if (v >= p.n_vec) return;
    const uint r = v / p.per_row, h = v % p.per_row, half_ = p.n_rot / 2u;
    F32 x = F32(p.x);
    const uint b = r * p.xs + h * p.hd;
    for (uint i = t; i < half_; i += 64u) {
        const float ci = F32(p.c).v[r * p.cs + i], si = F32(p.s).v[r * p.cs + i];
        const uint a0 = p.neox != 0u ? b + i : b + 2u * i, a1 = p.neox != 0u ? b + i + half_ : b + 2u * i + 1u;
        const float x0 = x.v[a0], x1 = x.v[a1];
        x.v[a0] = x0 * ci - x1 * si;
        x.v[a1] = x0 * si + x1 * ci;
    }
}
