#version 450
// attention.comp - ATTENTION (causal, optional sliding window of n_swa keys, GQA) for rows of one
// sequence: workgroup (head h, row r) runs an online softmax over the visible keys in tiles of 64
// (a key per thread for the scores, then every thread its own output dims), f32 throughout (the
// K/V cache converted from F16 on load). Then out *= sigmoid(gate) when flags & 1.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 q, out_, gate, k, v, pos;
    uint n_head, n_head_kv, hd, n_cells, n_swa, krow, vrow, qs, f16, flags;
    float scale;
} p;

const uint MAXD = 8u; // head_dim <= 512
shared float qv[512];
shared float pr[64];
shared uint cells[64];

void main() {
    const uint h = gl_WorkGroupID.x, r = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    const uint hk = h / (p.n_head / p.n_head_kv);
    const int pos = I32(p.pos).v[r];
    const int lo = p.n_swa > 0u ? max(0, pos - int(p.n_swa) + 1) : 0;
    F32 q = F32(p.q);
    U32 K = U32(p.k);
    U32 V = U32(p.v);
    const uint qb = r * p.qs + h * p.hd;
    for (uint d = t; d < p.hd; d += 64u) qv[d] = q.v[qb + d];
    barrier();
    float m = -1.0 / 0.0, l = 0.0;
    float acc[MAXD];
    for (uint k = 0u; k < MAXD; k++) acc[k] = 0.0;
    for (int t0 = lo; t0 <= pos; t0 += 64) {
        const int kp = t0 + int(t);
        float sc = -1.0 / 0.0;
        uint cell = 0u;
        if (kp <= pos) {
            cell = uint(kp) % p.n_cells;
            float s = 0.0;
            if (p.f16 != 0u) {
                const uint kb = cell * p.krow + hk * p.hd / 2u;
                for (uint d = 0u; d < p.hd / 2u; d++) {
                    vec2 kk = unpackHalf2x16(K.v[kb + d]);
                    s += qv[2u * d] * kk.x + qv[2u * d + 1u] * kk.y;
                }
            } else {
                const uint kb = cell * p.krow + hk * p.hd;
                for (uint d = 0u; d < p.hd; d++) s += qv[d] * uintBitsToFloat(K.v[kb + d]);
            }
            sc = s * p.scale;
        }
        pr[t] = sc;
        cells[t] = cell;
        barrier();
        float mt = m;
        for (uint j = 0u; j < 64u; j++) mt = max(mt, pr[j]);
        const float corr = exp(m - mt);
        barrier();
        pr[t] = kp <= pos ? exp(sc - mt) : 0.0;
        barrier();
        float ls = 0.0;
        for (uint j = 0u; j < 64u; j++) ls += pr[j];
        l = l * corr + ls;
        for (uint k = 0u; k < MAXD; k++) {
            const uint d = t + 64u * k;
            if (d >= p.hd) break;
            float a = acc[k] * corr;
            for (uint j = 0u; j < 64u; j++) {
                if (t0 + int(j) > pos) break;
                float vv;
                if (p.f16 != 0u) {
                    const uint vi = cells[j] * p.vrow * 2u + hk * p.hd + d;
                    vv = unpackHalf2x16(V.v[vi >> 1] >> ((vi & 1u) * 16u)).x;
                } else {
                    vv = uintBitsToFloat(V.v[cells[j] * p.vrow + hk * p.hd + d]);
                }
                a += pr[j] * vv;
            }
            acc[k] = a;
        }
        m = mt;
        barrier();
    }
    F32 o = F32(p.out_);
    for (uint k = 0u; k < MAXD; k++) {
        const uint d = t + 64u * k;
        if (d >= p.hd) break;
        float y = acc[k] / l;
        if ((p.flags & 1u) != 0u) y = y * sigmoid(F32(p.gate).v[qb + d]);
        o.v[qb + d] = y;
    }
}
