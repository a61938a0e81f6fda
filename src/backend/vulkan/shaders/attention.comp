#version 450
// attention.comp - ATTENTION (causal, optional sliding window of n_swa keys, GQA) for rows of one
// sequence: workgroup (head h, row r), in tiles of 64 keys (a key per thread for the scores, then
// every thread its own output dims). Two passes, as the cpu's softmax: the first finds the
// scores' max and the sum of exp(s - max), the second recomputes the scores and accumulates
// p = exp(s - max) * (1 / sum) times V. The cache types as the cpu reads them (backend_ref.c):
//   F32   q and p as they are;
//   F16   q and p rounded to F16 (what llama.cpp's mul_mat of an F16 cache does);
//   Q8_0  q quantized to Q8_0 per 32 dims (kernels/quant_legacy.c), K·q as an integer sum per
//         block times d_k * d_q, V dequantized, p as it is.
// Then out *= sigmoid(gate) when flags & 1.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 q, out_, gate, k, v, pos;
    uint n_head, n_head_kv, hd, n_cells, n_swa, krow, vrow, qs, kt, flags; // kt: 0 F32, 1 F16, 2 Q8_0
    float scale;
} p;

const uint MAXD = 8u; // head_dim <= 512
shared float qv[512];
shared float qd[16];  // Q8_0: the query's block scales (qv holds its codes)
shared float pr[64];
shared uint cells[64];

// q8_round_code of quant_legacy.c: roundf, 0 outside [-128, 127]
float round_code(float v) {
    if (!(v > -129.0 && v < 128.0)) return 0.0;
    int q = int(v);
    float frac = v - float(q);
    q += (frac >= 0.5 ? 1 : 0) - (frac <= -0.5 ? 1 : 0);
    return q >= -128 && q <= 127 ? float(q) : 0.0;
}

// the scaled score of key cell `cell` (words of U32 K; Q8_0 rows read by byte)
float score(U32 K, uint cell, uint hk) {
    float s = 0.0;
    if (p.kt == 1u) {
        const uint kb = cell * p.krow + hk * p.hd / 2u;
        for (uint d = 0u; d < p.hd / 2u; d++) {
            vec2 kk = unpackHalf2x16(K.v[kb + d]);
            s += qv[2u * d] * kk.x + qv[2u * d + 1u] * kk.y;
        }
    } else if (p.kt == 2u) {
        const uint kb = cell * p.krow * 4u + hk * (p.hd / 32u) * 34u;
        for (uint b = 0u; b < p.hd / 32u; b++) {
            const uint o = kb + 34u * b;
            int sumi = 0;
            for (uint j = 0u; j < 32u; j++) sumi += rsb(K, o + 2u + j) * int(qv[32u * b + j]);
            s += float(sumi) * (rh(K, o) * qd[b]);
        }
    } else {
        const uint kb = cell * p.krow + hk * p.hd;
        for (uint d = 0u; d < p.hd; d++) s += qv[d] * uintBitsToFloat(K.v[kb + d]);
    }
    return s * p.scale;
}

float value(U32 V, uint cell, uint hk, uint d) {
    if (p.kt == 1u) {
        const uint vi = cell * p.vrow * 2u + hk * p.hd + d;
        return unpackHalf2x16(V.v[vi >> 1] >> ((vi & 1u) * 16u)).x;
    } else if (p.kt == 2u) {
        const uint o = cell * p.vrow * 4u + hk * (p.hd / 32u) * 34u + 34u * (d >> 5);
        return float(rsb(V, o + 2u + (d & 31u))) * rh(V, o);
    }
    return uintBitsToFloat(V.v[cell * p.vrow + hk * p.hd + d]);
}

void main() {
    const uint h = gl_WorkGroupID.x, r = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    const uint hk = h / (p.n_head / p.n_head_kv);
    const int pos = I32(p.pos).v[r];
    const int lo = p.n_swa > 0u ? max(0, pos - int(p.n_swa) + 1) : 0;
    F32 q = F32(p.q);
    U32 K = U32(p.k);
    U32 V = U32(p.v);
    const uint qb = r * p.qs + h * p.hd;
    if (p.kt == 2u) { // Q8_0: d = amax / 127 (kept as f16), codes of x * (1 / d)
        for (uint b = t; b < p.hd / 32u; b += 64u) {
            float amax = 0.0;
            for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(q.v[qb + 32u * b + j]));
            float d = amax / 127.0;
            float id = d != 0.0 ? 1.0 / d : 0.0;
            qd[b] = unpackHalf2x16(f32_to_f16(d)).x;
            for (uint j = 0u; j < 32u; j++) qv[32u * b + j] = round_code(q.v[qb + 32u * b + j] * id);
        }
    } else {
        for (uint d = t; d < p.hd; d += 64u) qv[d] = p.kt == 1u ? unpackHalf2x16(f32_to_f16(q.v[qb + d])).x : q.v[qb + d];
    }
    barrier();
    // pass 1: the max and the sum of exp(s - max)
    float m = -1.0 / 0.0, l = 0.0;
    for (int t0 = lo; t0 <= pos; t0 += 64) {
        const int kp = t0 + int(t);
        pr[t] = kp <= pos ? score(K, uint(kp) % p.n_cells, hk) : -1.0 / 0.0;
        barrier();
        float mt = m;
        for (uint j = 0u; j < 64u; j++) mt = max(mt, pr[j]);
        float ls = 0.0;
        for (uint j = 0u; j < 64u; j++) ls += t0 + int(j) <= pos ? exp(pr[j] - mt) : 0.0;
        l = l * exp(m - mt) + ls;
        m = mt;
        barrier();
    }
    const float inv = 1.0 / l;
    // pass 2: p times V
    float acc[MAXD];
    for (uint k = 0u; k < MAXD; k++) acc[k] = 0.0;
    for (int t0 = lo; t0 <= pos; t0 += 64) {
        const int kp = t0 + int(t);
        const uint cell = kp <= pos ? uint(kp) % p.n_cells : 0u;
        float pj = kp <= pos ? exp(score(K, cell, hk) - m) * inv : 0.0;
        if (p.kt == 1u) pj = unpackHalf2x16(f32_to_f16(pj)).x;
        pr[t] = pj;
        cells[t] = cell;
        barrier();
        for (uint k = 0u; k < MAXD; k++) {
            const uint d = t + 64u * k;
            if (d >= p.hd) break;
            float a = acc[k];
            for (uint j = 0u; j < 64u; j++) {
                if (t0 + int(j) > pos) break;
                a += pr[j] * value(V, cells[j], hk, d);
            }
            acc[k] = a;
        }
        barrier();
    }
    F32 o = F32(p.out_);
    for (uint k = 0u; k < MAXD; k++) {
        const uint d = t + 64u * k;
        if (d >= p.hd) break;
        float y = acc[k];
        if ((p.flags & 1u) != 0u) y = y * sigmoid(F32(p.gate).v[qb + d]);
        o.v[qb + d] = y;
    }
}
