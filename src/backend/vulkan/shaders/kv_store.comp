#version 450
// kv_store.comp - KV_STORE for rows of one sequence: k row r and v row r into cell pos[r] % n_cells
// of the layer's arrays, F16 (round to nearest even, the bits of muse_fp32_to_fp16) or F32.
// Workgroup (r, 0: k / 1: v).
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 k, v, kd, vd, pos;
    uint ks, vs, nk, nv, n_cells, krow, vrow, f16; // krow / vrow: words per cell
} p;

void main() {
    const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, which = gl_WorkGroupID.y;
    const uint cell = uint(I32(p.pos).v[r]) % p.n_cells;
    F32 src = F32(which == 0u ? p.k : p.v);
    U32 dst = U32(which == 0u ? p.kd : p.vd);
    const uint n = which == 0u ? p.nk : p.nv, sb = r * (which == 0u ? p.ks : p.vs);
    const uint db = cell * (which == 0u ? p.krow : p.vrow);
    if (p.f16 != 0u) {
        for (uint i = t; i < n / 2u; i += 64u)
            dst.v[db + i] = f32_to_f16(src.v[sb + 2u * i]) | (f32_to_f16(src.v[sb + 2u * i + 1u]) << 16);
    } else {
        for (uint i = t; i < n; i += 64u) dst.v[db + i] = floatBitsToUint(src.v[sb + i]);
    }
}
