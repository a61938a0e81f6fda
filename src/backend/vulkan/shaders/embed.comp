#version 450
// embed.comp - EMBED: row r = the token's row of the embedding table (dq8, the table's type as
// WTYPE), or an injected row (src[r] >= 0: row src[r] of inj).
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 table, tokens, src, inj, dst, tab;
    uint n, row_size, ds, n_rows;
} p;

void main() {
    const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    F32 dst = F32(p.dst);
    const int s = I32(p.src).v[r];
    if (s >= 0) {
        F32 inj = F32(p.inj);
        for (uint c = t; c < p.n; c += 64u) dst.v[r * p.ds + c] = inj.v[uint(s) * p.n + c];
        return;
    }
    const uint o = uint(I32(p.tokens).v[r]) * p.row_size;
    for (uint g = t; g < p.n / 8u; g += 64u) {
        float v[8];
        dq8(U32(p.table), U32(p.tab), o, g, v);
        for (uint j = 0u; j < 8u; j++) dst.v[r * p.ds + g * 8u + j] = v[j];
    }
}
