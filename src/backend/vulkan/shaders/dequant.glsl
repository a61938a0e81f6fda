// dequant.glsl - 8 consecutive weights of a row as floats, for every weight type with a shader.
// WTYPE (a specialization constant) is muse's type id (gguf/tensor_type.h, ggml's numbering);
// the compiler keeps only its branch. Block layouts are ggml's (docs/gguf-and-quants.md); the
// values are the reference dequantizers' (kernels/quant_*.c): the same products in the same order,
// so a dequantized weight is bit-identical to muse's to_float.
//
// dq8(w, o, g, v): row starting at byte o of w, elements 8g .. 8g+7 into v.
// tab: the device's table buffer (iq2xxs grid as word pairs at 0, ksigns at 512, iq4nl at 640).

layout(constant_id = 0) const uint WTYPE = 0u;

const uint T_F32 = 0u, T_F16 = 1u, T_Q4_0 = 2u, T_Q8_0 = 8u, T_Q4_K = 12u, T_Q5_K = 13u, T_Q6_K = 14u,
           T_IQ2_XXS = 16u, T_IQ4_XS = 23u, T_BF16 = 30u;

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (ggml's get_scale_min_k4)
void scale_min_k4(U32 w, uint sc, uint j, out float d, out float m) {
    uint a, b;
    if (j < 4u) {
        a = rb(w, sc + j) & 63u;
        b = rb(w, sc + j + 4u) & 63u;
    } else {
        a = (rb(w, sc + j + 4u) & 0xfu) | ((rb(w, sc + j - 4u) >> 6) << 4);
        b = (rb(w, sc + j + 4u) >> 4) | ((rb(w, sc + j) >> 6) << 4);
    }
    d = float(a);
    m = float(b);
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
        float d = rh(w, b), dmin = rh(w, b + 2u), sc, mn;
        scale_min_k4(w, b + 4u, 2u * c + hi, sc, mn);
        float d1 = d * sc, m1 = dmin * mn;
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
        uint signs = tab.v[512u + ((aux1 >> (7u * l)) & 127u)];
        uint g0 = tab.v[2u * idx], g1 = tab.v[2u * idx + 1u];
        for (uint j = 0u; j < 8u; j++) {
            uint m = ((j < 4u ? g0 : g1) >> (8u * (j & 3u))) & 0xffu;
            v[j] = db * float(m) * ((signs & (1u << j)) != 0u ? -1.0 : 1.0);
        }
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
            v[j] = dl * float(int(tab.v[640u + q]));
        }
    }
}
