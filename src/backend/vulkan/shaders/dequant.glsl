// dequant.glsl - 8 consecutive weights of a row as floats, for every weight type with a shader.
// WTYPE (a specialization constant) is muse's type id (gguf/tensor_type.h, ggml's numbering);
// the compiler keeps only its branch. Block layouts are ggml's (docs/gguf-and-quants.md); the
// values are the reference dequantizers' (kernels/quant_*.c): the same products in the same order,
// so a dequantized weight is bit-identical to muse's to_float.
//
// dq8(w, o, g, v): row starting at byte o of w, elements 8g .. 8g+7 into v.
// tab: the device's table buffer (the grids and codebooks of kernels/quant_tables.c, laid out by
// tab_layout.h). Most types take one element at a time through small helpers (the plain path).

#include "tab_layout.h"

layout(constant_id = 0) const uint WTYPE = 0u;

const uint T_F32 = 0u, T_F16 = 1u, T_Q4_0 = 2u, T_Q4_1 = 3u, T_Q5_0 = 6u, T_Q5_1 = 7u, T_Q8_0 = 8u, T_Q2_K = 10u,
           T_Q3_K = 11u, T_Q4_K = 12u, T_Q5_K = 13u, T_Q6_K = 14u, T_IQ2_XXS = 16u, T_IQ2_XS = 17u, T_IQ3_XXS = 18u,
           T_IQ1_S = 19u, T_IQ4_NL = 20u, T_IQ3_S = 21u, T_IQ2_S = 22u, T_IQ4_XS = 23u, T_IQ1_M = 29u, T_BF16 = 30u,
           T_TQ1_0 = 34u, T_TQ2_0 = 35u, T_MXFP4 = 39u, T_NVFP4 = 40u, T_Q1_0 = 41u;

// the 4-bit code of element e (0..31) of a 32-element block whose 16 nibble bytes start at qs
uint nib32(U32 w, uint qs, uint e) { return e < 16u ? rb(w, qs + e) & 15u : rb(w, qs + e - 16u) >> 4; }
// Q2_K / TQ2_0: the 2-bit code of element e of a 256-element block (64-byte plane array at qs)
uint plane2(U32 w, uint qs, uint e) { return (rb(w, qs + 32u * (e >> 7) + (e & 31u)) >> (2u * ((e & 127u) >> 5))) & 3u; }
// byte j of a 64-bit grid entry at word index i of tab (two words)
uint g8(U32 tab, uint i, uint j) { return (tab.v[i + (j >> 2)] >> (8u * (j & 3u))) & 0xffu; }
// TQ1_0: trit n of byte b: ((b * 3^n) mod 256) * 3 >> 8
uint trit(uint b, uint n) {
    uint p = n == 0u ? 1u : n == 1u ? 3u : n == 2u ? 9u : n == 3u ? 27u : 81u;
    return (((b * p) & 0xffu) * 3u) >> 8;
}
// UE4M3 "half": 0.5 * UE4M3(x), 0 for 0x00 and 0x7f, bit 7 ignored (kernels/quant_util.h)
float ue4m3_half(uint x) {
    if (x == 0u || x == 0x7fu) return 0.0;
    uint e = (x >> 3) & 15u, m = x & 7u;
    float raw = e == 0u ? ldexp(float(m), -9) : ldexp(1.0 + float(m) / 8.0, int(e) - 7);
    return raw * 0.5;
}

void dq8(U32 w, U32 tab, uint o, uint g, out float v[8]) {
    if (WTYPE == T_F32) {
        uint b = (o >> 2) + g * 8u;
        for (uint j = 0u; j < 8u; j++) v[j] = uintBitsToFloat(w.v[b + j]);
    } else if (WTYPE == T_F16) {
        uint b = (o >> 2) + g * 4u;
        for (uint j = 0u; j < 4u; j++) {
            vec2 h = unpackHalf2x16(w.v[b + j]);
            v[2u * j] = h.x;
            v[2u * j + 1u] = h.y;
        }
    } else if (WTYPE == T_BF16) {
        uint b = (o >> 2) + g * 4u;
        for (uint j = 0u; j < 4u; j++) {
            uint x = w.v[b + j];
            v[2u * j] = uintBitsToFloat(x << 16);
            v[2u * j + 1u] = uintBitsToFloat(x & 0xffff0000u);
        }
    } else if (WTYPE == T_Q8_0) {
        uint b = o + (g >> 2) * 34u;
        float d = rh(w, b);
        uint q = b + 2u + (g & 3u) * 8u;
        for (uint j = 0u; j < 8u; j++) v[j] = float(rsb(w, q + j)) * d;
    } else if (WTYPE == T_Q4_0) {
        uint b = o + (g >> 2) * 18u;
        float d = rh(w, b);
        uint e0 = (g & 3u) * 8u;
        for (uint j = 0u; j < 8u; j++) {
            uint e = e0 + j;
            uint q = e < 16u ? rb(w, b + 2u + e) & 15u : rb(w, b + 2u + e - 16u) >> 4;
            v[j] = (float(int(q)) - 8.0) * d;
        }
    } else if (WTYPE == T_Q4_K || WTYPE == T_Q5_K) {
        uint bs = WTYPE == T_Q4_K ? 144u : 176u;
        uint b = o + (g >> 5) * bs;
        uint e0 = (g & 31u) * 8u, c = e0 >> 6, w64 = e0 & 63u, hi = w64 >> 5, l0 = w64 & 31u;
        float d = rh(w, b), dmin = rh(w, b + 2u);
        uint sc, mn; // the block (and its scales) starts on a word: 144- and 176-byte blocks
        k4_scale_min(uvec3(w.v[(b >> 2) + 1u], w.v[(b >> 2) + 2u], w.v[(b >> 2) + 3u]), 2u * c + hi, sc, mn);
        float d1 = d * float(sc), m1 = dmin * float(mn);
        uint qs = b + (WTYPE == T_Q4_K ? 16u : 48u) + 32u * c;
        uint u = (hi == 0u ? 1u : 2u) << (2u * c);
        for (uint j = 0u; j < 8u; j++) {
            uint q = rb(w, qs + l0 + j);
            q = hi == 0u ? q & 15u : q >> 4;
            if (WTYPE == T_Q5_K && (rb(w, b + 16u + l0 + j) & u) != 0u) q += 16u;
            v[j] = d1 * float(q) - m1;
        }
    } else if (WTYPE == T_Q6_K) {
        uint b = o + (g >> 5) * 210u;
        uint e0 = (g & 31u) * 8u, n = e0 >> 7, eh = e0 & 127u, qd = eh >> 5, l0 = eh & 31u;
        uint ql = b + 64u * n, qh = b + 128u + 32u * n, sc = b + 192u + 8u * n;
        float d = rh(w, b + 208u);
        for (uint j = 0u; j < 8u; j++) {
            uint l = l0 + j, is = l >> 4, q;
            uint h = rb(w, qh + l);
            if (qd == 0u) q = (rb(w, ql + l) & 15u) | ((h & 3u) << 4);
            else if (qd == 1u) q = (rb(w, ql + l + 32u) & 15u) | (((h >> 2) & 3u) << 4);
            else if (qd == 2u) q = (rb(w, ql + l) >> 4) | (((h >> 4) & 3u) << 4);
            else q = (rb(w, ql + l + 32u) >> 4) | (((h >> 6) & 3u) << 4);
            v[j] = d * float(rsb(w, sc + is + 2u * qd)) * float(int(q) - 32);
        }
    } else if (WTYPE == T_IQ2_XXS) {
        uint b = o + (g >> 5) * 66u;
        uint ib = (g & 31u) >> 2, l = g & 3u;
        float d = rh(w, b);
        uint q = b + 2u + 8u * ib;
        uint idx = rb(w, q + l), aux1 = ru32(w, q + 4u);
        float db = d * (0.5 + float(aux1 >> 28)) * 0.25;
        uint signs = tab.v[TAB_KSIGNS + ((aux1 >> (7u * l)) & 127u)];
        uint g0 = tab.v[TAB_IQ2XXS + 2u * idx], g1 = tab.v[TAB_IQ2XXS + 2u * idx + 1u];
        for (uint j = 0u; j < 8u; j++) {
            uint m = ((j < 4u ? g0 : g1) >> (8u * (j & 3u))) & 0xffu;
            v[j] = db * float(m) * ((signs & (1u << j)) != 0u ? -1.0 : 1.0);
        }
    } else if (WTYPE == T_Q4_1 || WTYPE == T_Q5_0 || WTYPE == T_Q5_1) {
        uint bs = WTYPE == T_Q4_1 ? 20u : WTYPE == T_Q5_0 ? 22u : 24u;
        uint b = o + (g >> 2) * bs, e0 = (g & 3u) * 8u;
        float d = rh(w, b), m = WTYPE == T_Q5_0 ? 0.0 : rh(w, b + 2u);
        uint qh = WTYPE == T_Q4_1 ? 0u : ru32(w, b + (WTYPE == T_Q5_0 ? 2u : 4u));
        uint qs = b + (WTYPE == T_Q4_1 ? 4u : WTYPE == T_Q5_0 ? 6u : 8u);
        for (uint j = 0u; j < 8u; j++) {
            uint e = e0 + j, q = nib32(w, qs, e) | (((qh >> e) & 1u) << 4);
            if (WTYPE == T_Q5_0) v[j] = float(int(q) - 16) * d;
            else v[j] = float(q) * d + m;
        }
    } else if (WTYPE == T_IQ4_NL || WTYPE == T_MXFP4) {
        uint b = o + (g >> 2) * (WTYPE == T_IQ4_NL ? 18u : 17u), e0 = (g & 3u) * 8u;
        float d;
        if (WTYPE == T_IQ4_NL) {
            d = rh(w, b);
        } else { // E8M0 "half" (muse_e8m0_half)
            uint e = rb(w, b);
            d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
        }
        uint qs = b + (WTYPE == T_IQ4_NL ? 2u : 1u);
        for (uint j = 0u; j < 8u; j++) {
            float k = float(int(tab.v[(WTYPE == T_IQ4_NL ? TAB_IQ4NL : TAB_MXFP4) + nib32(w, qs, e0 + j)]));
            v[j] = WTYPE == T_IQ4_NL ? d * k : k * d;
        }
    } else if (WTYPE == T_NVFP4) {
        uint b = o + (g >> 3) * 36u, e0 = (g & 7u) * 8u, sb = e0 >> 4, hi = (e0 >> 3) & 1u;
        float d = ue4m3_half(rb(w, b + sb));
        for (uint j = 0u; j < 8u; j++) {
            uint c = rb(w, b + 4u + 8u * sb + j);
            v[j] = float(int(tab.v[TAB_MXFP4 + (hi == 0u ? c & 15u : c >> 4)])) * d;
        }
    } else if (WTYPE == T_Q1_0) {
        uint b = o + (g >> 4) * 18u;
        float d = rh(w, b);
        uint q = rb(w, b + 2u + (g & 15u));
        for (uint j = 0u; j < 8u; j++) v[j] = ((q >> j) & 1u) != 0u ? d : -d;
    } else if (WTYPE == T_Q2_K) {
        uint b = o + (g >> 5) * 84u, e0 = (g & 31u) * 8u;
        float d = rh(w, b + 80u), dmin = rh(w, b + 82u);
        uint s = rb(w, b + (e0 >> 4));
        float dl = d * float(s & 15u), ml = dmin * float(s >> 4);
        for (uint j = 0u; j < 8u; j++) v[j] = dl * float(plane2(w, b + 16u, e0 + j)) - ml;
    } else if (WTYPE == T_Q3_K) {
        uint b = o + (g >> 5) * 110u, e0 = (g & 31u) * 8u, i = e0 >> 4;
        float d = rh(w, b + 108u);
        uint S = b + 96u;
        uint low4 = i < 8u ? rb(w, S + i) & 15u : rb(w, S + i - 8u) >> 4;
        uint high2 = (rb(w, S + 8u + (i & 3u)) >> (2u * (i >> 2))) & 3u;
        float dl = d * float(int(low4 | (high2 << 4)) - 32);
        for (uint j = 0u; j < 8u; j++) {
            uint e = e0 + j;
            uint hb = (rb(w, b + (e & 31u)) >> (e >> 5)) & 1u;
            v[j] = dl * float(int(plane2(w, b + 32u, e)) - (hb != 0u ? 0 : 4));
        }
    } else if (WTYPE == T_TQ2_0) {
        uint b = o + (g >> 5) * 66u, e0 = (g & 31u) * 8u;
        float d = rh(w, b + 64u);
        for (uint j = 0u; j < 8u; j++) v[j] = float(int(plane2(w, b, e0 + j)) - 1) * d;
    } else if (WTYPE == T_TQ1_0) {
        uint b = o + (g >> 5) * 54u, e0 = (g & 31u) * 8u;
        float d = rh(w, b + 52u);
        for (uint j = 0u; j < 8u; j++) {
            uint e = e0 + j, c;
            if (e < 160u) c = trit(rb(w, b + (e & 31u)), e >> 5);
            else if (e < 240u) c = trit(rb(w, b + 32u + ((e - 160u) & 15u)), (e - 160u) >> 4);
            else c = trit(rb(w, b + 48u + ((e - 240u) & 3u)), (e - 240u) >> 2);
            v[j] = float(int(c) - 1) * d;
        }
    } else if (WTYPE == T_IQ2_XS || WTYPE == T_IQ2_S) {
        uint b = o + (g >> 5) * (WTYPE == T_IQ2_XS ? 74u : 82u);
        uint ib = (g & 31u) >> 2, l = g & 3u;
        float d = rh(w, b);
        uint sc = rb(w, b + (WTYPE == T_IQ2_XS ? 66u : 74u) + ib);
        float db = d * (0.5 + float(l < 2u ? sc & 15u : sc >> 4)) * 0.25;
        uint gi, signs;
        if (WTYPE == T_IQ2_XS) {
            uint q = ru16(w, b + 2u + 2u * (4u * ib + l));
            gi = TAB_IQ2XS + 2u * (q & 511u);
            signs = tab.v[TAB_KSIGNS + (q >> 9)];
        } else {
            gi = TAB_IQ2S + 2u * (rb(w, b + 2u + 4u * ib + l) | (((rb(w, b + 66u + ib) >> (2u * l)) & 3u) << 8));
            signs = rb(w, b + 34u + 4u * ib + l);
        }
        for (uint j = 0u; j < 8u; j++) v[j] = db * float(g8(tab, gi, j)) * ((signs & (1u << j)) != 0u ? -1.0 : 1.0);
    } else if (WTYPE == T_IQ3_XXS || WTYPE == T_IQ3_S) {
        uint b = o + (g >> 5) * (WTYPE == T_IQ3_XXS ? 98u : 110u);
        uint ib = (g & 31u) >> 2, l = g & 3u;
        float d = rh(w, b), db;
        uint i1, i2, signs;
        if (WTYPE == T_IQ3_XXS) {
            uint W = ru32(w, b + 66u + 4u * ib);
            db = d * (0.5 + float(W >> 28)) * 0.5;
            signs = tab.v[TAB_KSIGNS + ((W >> (7u * l)) & 127u)];
            i1 = TAB_IQ3XXS + rb(w, b + 2u + 8u * ib + 2u * l);
            i2 = TAB_IQ3XXS + rb(w, b + 2u + 8u * ib + 2u * l + 1u);
        } else {
            db = d * float(1u + 2u * ((rb(w, b + 106u + (ib >> 1)) >> (4u * (ib & 1u))) & 15u));
            uint qh = rb(w, b + 66u + ib);
            i1 = TAB_IQ3S + (rb(w, b + 2u + 8u * ib + 2u * l) | (((qh >> (2u * l)) & 1u) << 8));
            i2 = TAB_IQ3S + (rb(w, b + 2u + 8u * ib + 2u * l + 1u) | (((qh >> (2u * l + 1u)) & 1u) << 8));
            signs = rb(w, b + 74u + 4u * ib + l);
        }
        uint g1 = tab.v[i1], g2 = tab.v[i2];
        for (uint j = 0u; j < 8u; j++) {
            uint m = ((j < 4u ? g1 : g2) >> (8u * (j & 3u))) & 0xffu;
            v[j] = db * float(m) * ((signs & (1u << j)) != 0u ? -1.0 : 1.0);
        }
    } else if (WTYPE == T_IQ1_S || WTYPE == T_IQ1_M) {
        uint ib = (g & 31u) >> 2, l = g & 3u, gi;
        float dl, delta;
        if (WTYPE == T_IQ1_S) {
            uint b = o + (g >> 5) * 50u;
            float d = rh(w, b);
            uint h = ru16(w, b + 34u + 2u * ib);
            dl = d * float(2u * ((h >> 12) & 7u) + 1u);
            delta = (h & 0x8000u) != 0u ? -0.125 : 0.125;
            gi = TAB_IQ1S + 2u * (rb(w, b + 2u + 4u * ib + l) | (((h >> (3u * l)) & 7u) << 8));
        } else {
            uint b = o + (g >> 5) * 56u;
            uint s0 = ru16(w, b + 48u), s1 = ru16(w, b + 50u), s2 = ru16(w, b + 52u), s3 = ru16(w, b + 54u);
            float d = unpackHalf2x16((s0 >> 12) | ((s1 >> 8) & 0xf0u) | ((s2 >> 4) & 0xf00u) | (s3 & 0xf000u)).x;
            uint sw = ib < 2u ? s0 : ib < 4u ? s1 : ib < 6u ? s2 : s3;
            uint sc = sw >> (6u * (ib & 1u));
            dl = d * float(2u * ((l < 2u ? sc : sc >> 3) & 7u) + 1u);
            uint nib = (rb(w, b + 32u + 2u * ib + (l >> 1)) >> (4u * (l & 1u))) & 15u;
            delta = (nib & 8u) != 0u ? -0.125 : 0.125;
            gi = TAB_IQ1S + 2u * (rb(w, b + 4u * ib + l) | ((nib & 7u) << 8));
        }
        for (uint j = 0u; j < 8u; j++) v[j] = dl * (float(int(g8(tab, gi, j) << 24) >> 24) + delta);
    } else if (WTYPE == T_IQ4_XS) {
        uint b = o + (g >> 5) * 136u;
        uint ib = (g & 31u) >> 2, e = (g & 3u) * 8u;
        float d = rh(w, b);
        uint sh = ru16(w, b + 2u);
        uint ls = ((rb(w, b + 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 15u) | (((sh >> (2u * ib)) & 3u) << 4);
        float dl = d * float(int(ls) - 32);
        uint qs = b + 8u + 16u * ib;
        for (uint j = 0u; j < 8u; j++) {
            uint k = e + j;
            uint q = k < 16u ? rb(w, qs + k) & 15u : rb(w, qs + k - 16u) >> 4;
            v[j] = dl * float(int(tab.v[TAB_IQ4NL + q]));
        }
    }
}
