#version 450
// matmul_f16.comp - MATMUL, the fp16-arithmetic variant (docs/vulkan.md "Fast variants"): the
// layout of matmul.comp (64/TPR output rows x 8 batch rows a workgroup), but each group of 8
// dequantized weights and the matching activations (rounded as the cpu does, act_quant.comp) are taken to f16 and multiplied and summed
// in f16 (two f16vec4 dots), the groups' sums accumulated in f32. Half the register and ALU width
// of the plain path on GPUs with fast fp16; its own tolerance (products rounded to 11 bits).
// Chosen when the device has shaderFloat16 (a GPU; MUSE_VK_VARIANT=f16 forces it, plain turns it off).
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "dequant.glsl"

layout(constant_id = 1) const uint TPR = 64u;
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uvec2 w, x, y, bias, tab;
    uint ne0, ne1, row_size, n_rows, xs, ys, flags; // flags: 1 scale, 2 bias
    float scale;
} p;

shared float red[8][64];

void main() {
    const uint t = gl_LocalInvocationID.x, lane = t % TPR;
    const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u) * (64u / TPR) + t / TPR;
    const bool valid = i < p.ne1;
    const uint r0 = gl_WorkGroupID.y * 8u;
    const uint nr = min(8u, p.n_rows - r0);
    U32 w = U32(p.w);
    U32 tab = U32(p.tab);
    F32 x = F32(p.x);
    float acc[8] = float[8](0, 0, 0, 0, 0, 0, 0, 0);
    const uint o = i * p.row_size;
    for (uint g = lane; valid && g < p.ne0 / 8u; g += TPR) {
        float v[8];
        dq8(w, tab, o, g, v);
        const f16vec4 w0 = f16vec4(v[0], v[1], v[2], v[3]), w1 = f16vec4(v[4], v[5], v[6], v[7]);
        for (uint r = 0u; r < nr; r++) {
            const uint xb = (r0 + r) * p.xs + g * 8u;
            const f16vec4 x0 = f16vec4(x.v[xb], x.v[xb + 1u], x.v[xb + 2u], x.v[xb + 3u]);
            const f16vec4 x1 = f16vec4(x.v[xb + 4u], x.v[xb + 5u], x.v[xb + 6u], x.v[xb + 7u]);
            acc[r] += float(dot(w0, x0) + dot(w1, x1));
        }
    }
    if (TPR > 1u) {
        for (uint r = 0u; r < 8u; r++) red[r][t] = acc[r];
        barrier();
        for (uint s = TPR / 2u; s > 0u; s >>= 1) {
            if (lane < s)
                for (uint r = 0u; r < 8u; r++) red[r][t] += red[r][t + s];
            barrier();
        }
        for (uint r = 0u; r < 8u; r++) acc[r] = red[r][t];
    }
    if (!valid || lane != 0u) return;
    for (uint r = 0u; r < nr; r++) {
        float v = acc[r];
        if ((p.flags & 1u) != 0u) v = v * p.scale;
        if ((p.flags & 2u) != 0u) v = v + F32(p.bias).v[i];
        F32(p.y).v[(r0 + r) * p.ys + i] = v;
    }
}
