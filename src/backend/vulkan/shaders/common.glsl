// common.glsl - what every muse compute shader shares (docs/vulkan.md "Shaders").
//
// No descriptor sets: every buffer is reached through its device address (Vulkan 1.2
// bufferDeviceAddress), passed in the push constants as a uvec2 (GL_EXT_buffer_reference_uvec2,
// so no shaderInt64 is needed). Addresses are 4-byte aligned; quantized blocks are read as 32-bit
// words and picked apart (no 8/16-bit storage features needed).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };

// the byte at byte offset o, as unsigned and as signed
uint rb(U32 w, uint o) { return (w.v[o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }
int rsb(U32 w, uint o) { return int(rb(w, o) << 24) >> 24; }
// the f16 at even byte offset o
float rh(U32 w, uint o) { return unpackHalf2x16(w.v[o >> 2] >> ((o & 2u) * 8u)).x; }
// the little-endian u16 / u32 at byte offset o (any alignment)
uint ru16(U32 w, uint o) { return rb(w, o) | (rb(w, o + 1u) << 8); }
uint ru32(U32 w, uint o) { return ru16(w, o) | (ru16(w, o + 2u) << 16); }

// f32 -> f16 bits, round to nearest even (as muse_fp32_to_fp16: the same bits on every device)
uint f32_to_f16(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint e = (x >> 23) & 0xffu;
    uint m = x & 0x7fffffu;
    if (e == 0xffu) return sign | 0x7c00u | (m != 0u ? 0x200u | (m >> 13) : 0u);
    int ue = int(e) - 127 + 15;
    if (ue >= 0x1f) return sign | 0x7c00u;
    if (ue <= 0) {
        if (ue < -10) return sign;
        m |= 0x800000u;
        uint shift = uint(14 - ue);
        uint h = m >> shift;
        uint rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (h & 1u) != 0u)) h++;
        return sign | h;
    }
    uint h = (uint(ue) << 10) | (m >> 13);
    uint rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (ggml's get_scale_min_k4) from the block's
// 12 scale bytes, held as three words
void k4_scale_min(uvec3 s, uint j, out uint sc, out uint m) {
#define K4B(k) ((s[(k) >> 2] >> (8u * ((k) & 3u))) & 0xffu)
    if (j < 4u) {
        sc = K4B(j) & 63u;
        m = K4B(j + 4u) & 63u;
    } else {
        sc = (K4B(j + 4u) & 15u) | ((K4B(j - 4u) >> 6) << 4);
        m = (K4B(j + 4u) >> 4) | ((K4B(j) >> 6) << 4);
    }
#undef K4B
}

// a / b correctly rounded: GLSL allows OpFDiv 2.5 ulp (a GPU's reciprocal times a), the cpu's
// quantizers divide exactly; one residual step (exact by fma) corrects the quotient
float div_rn(float a, float b) {
    precise float q = a / b;
    precise float r = fma(-q, b, a);
    precise float c = fma(r, 1.0 / b, q);
    return c;
}

float sigmoid(float g) { return 1.0 / (1.0 + exp(-g)); }
