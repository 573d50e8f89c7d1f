// Vector helpers the native kernels share (runtime/native/logit_kernel.cc, runtime/native/attention_kernel.cc,
// runtime/native/layer_kernel.cc). GCC's vector extensions keep them portable (AVX-512, AVX2 or NEON: whatever
// the build's -march offers). Every function works lane by lane with plain arithmetic (no libm), so a value
// gets the same result in any lane and in any call: what makes the kernels' results independent of how
// many rows share a call. The kernels are built with -ffp-contract=off (runtime/native/build.py): GCC's C++ modes
// otherwise fuse a * b + c into one multiply-add wherever it sees fit, and it saw fit differently in the copies of
// a loop made for one row and for two, so a row's attention differed with the rows beside it. A fused multiply-add
// is written as one (mul_add), everywhere alike.
//
// A vector is one register of the build's processor: 16 floats with AVX-512, 8 with AVX, 4 elsewhere (SSE,
// NEON). Wider-than-native vectors are legal GCC but compile to pieces moved through the stack: the 16-float
// vectors these kernels once used everywhere made the tree attention 18x slower than ATen's on AVX2.
#pragma once

#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || (defined(__FMA__) && defined(__AVX__))
#include <immintrin.h>
#endif

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif

typedef float vf __attribute__((vector_size(4 * kLanes)));
typedef int32_t vi __attribute__((vector_size(4 * kLanes)));

inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }

// a * b + c rounded once, in every lane (one instruction where the processor has it)
#if defined(__AVX512F__)
inline vf mul_add(vf a, vf b, vf c) { return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif defined(__FMA__) && defined(__AVX__)
inline vf mul_add(vf a, vf b, vf c) { return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#else
inline vf mul_add(vf a, vf b, vf c) { for (int l = 0; l < kLanes; l++) c[l] = __builtin_fmaf(a[l], b[l], c[l]); return c; }
#endif
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }

inline float hmax(vf v) {
    float m = v[0];
    for (int l = 1; l < kLanes; l++) m = v[l] > m ? v[l] : m;
    return m;
}

// exp(y) for y <= 0, lane by lane: y log2(e) = n + f with |f| <= 1/2, 2^f by a degree-6 polynomial
// (relative error about 2e-7, like expf), 2^n through the exponent bits. y below -87 counts as -87
// (exp(-87) ~ 2e-38: nothing next to the row's largest term, which is 1).
inline vf exp_nonpositive(vf y) {
    y = vmax(y, splat(-87.0f));
    vf t = y * 1.44269504088896341f;
    // adding 1.5 * 2^23 rounds t to the nearest integer n, which then sits in the low mantissa bits
    vf shifted = t + 12582912.0f;
    vf n = shifted - 12582912.0f;
    vf f = t - n;
    vf p = splat(1.535336188319500e-4f);
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    vi bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    bits = (bits + 127) << 23;  // 2^n's exponent field (shifted's own exponent bits fall off the top)
    vf scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

}  // namespace
