#version 450
// kv_store.comp - KV_STORE for rows of one sequence: k row r and v row r into cell pos[r] % n_cells
// of the layer's arrays, by the cache type kt: F32, F16 (round to nearest even, the bits of
// muse_fp32_to_fp16) or Q8_0 (quant_legacy.c's reference quantizer: d = amax / 127 as f16, codes
// roundf(x / d); a thread per block builds the row in shared memory, then it is stored by words).
// Workgroup (r, 0: k / 1: v).
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 k, v, kd, vd, pos;
    uint ks, vs, nk, nv, n_cells, krow, vrow, kt; // krow / vrow: words per cell; kt: 0 F32, 1 F16, 2 Q8_0
} p;

const uint MAXW = 2176u; // Q8_0 rows up to 8192 values
shared uint row[MAXW];

float round_code(float v) {
    if (!(v > -129.0 && v < 128.0)) return 0.0;
    int q = int(v);
    float frac = v - float(q);
    q += (frac >= 0.5 ? 1 : 0) - (frac <= -0.5 ? 1 : 0);
    return q >= -128 && q <= 127 ? float(q) : 0.0;
}

void put(uint o, uint byte) { atomicOr(row[o >> 2], (byte & 0xffu) << ((o & 3u) * 8u)); }

void main() {
    const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, which = gl_WorkGroupID.y;
    const uint cell = uint(I32(p.pos).v[r]) % p.n_cells;
    F32 src = F32(which == 0u ? p.k : p.v);
    U32 dst = U32(which == 0u ? p.kd : p.vd);
    const uint n = which == 0u ? p.nk : p.nv, sb = r * (which == 0u ? p.ks : p.vs);
    const uint words = which == 0u ? p.krow : p.vrow, db = cell * words;
    if (p.kt == 1u) {
        for (uint i = t; i < n / 2u; i += 64u)
            dst.v[db + i] = f32_to_f16(src.v[sb + 2u * i]) | (f32_to_f16(src.v[sb + 2u * i + 1u]) << 16);
    } else if (p.kt == 2u) {
        for (uint i = t; i < words; i += 64u) row[i] = 0u;
        barrier();
        for (uint b = t; b < n / 32u; b += 64u) {
            float amax = 0.0;
            for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(src.v[sb + 32u * b + j]));
            float d = amax / 127.0;
            float id = d != 0.0 ? 1.0 / d : 0.0;
            uint dh = f32_to_f16(d);
            put(34u * b, dh);
            put(34u * b + 1u, dh >> 8);
            for (uint j = 0u; j < 32u; j++) put(34u * b + 2u + j, uint(int(round_code(src.v[sb + 32u * b + j] * id))));
        }
        barrier();
        for (uint i = t; i < words; i += 64u) dst.v[db + i] = row[i];
    } else {
        for (uint i = t; i < n; i += 64u) dst.v[db + i] = floatBitsToUint(src.v[sb + i]);
    }
}
