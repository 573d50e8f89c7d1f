// The lean forward's elementwise work on a CPU (fp32): rmsnorm, rotary embedding and the gated
// activation, one call each where torch runs four to eight small ops (each a dispatch, an allocation and
// a pass over the rows). runtime/native/layer_kernel.py compiles it once per machine; torch's ops run wherever it
// cannot. Every row is computed on its own, so a row's numbers never depend on how many rows share a call.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "vector_math.h"

namespace {

inline float hsum(vf v) {
    float s = 0.0f;
    for (int l = 0; l < kLanes; l++) s += v[l];
    return s;
}

}  // namespace

extern "C" {

// out (rows, dim) = h / sqrt(mean(h^2) + eps) * weight, per row; dim a multiple of 16
void layer_kernel_rmsnorm(const float* h, const float* weight, float eps, int64_t rows, int64_t dim, float* out) {
    for (int64_t r = 0; r < rows; r++) {
        const float* x = h + r * dim;
        vf squares = vf{};
        for (int64_t i = 0; i < dim; i += kLanes) {
            const vf v = load(x + i);
            squares += v * v;
        }
        const float scale = 1.0f / std::sqrt(hsum(squares) / float(dim) + eps);
        for (int64_t i = 0; i < dim; i += kLanes) store(out + r * dim + i, load(weight + i) * (load(x + i) * scale));
    }
}

// In place, for each of `heads` heads of d values in each of `rows` rows (row r at qk + r * row_stride):
// x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[d/2:], x[:d/2]); cos, sin (rows, d); d a multiple of 32
void layer_kernel_rotary(float* qk, int64_t row_stride, int64_t rows, int64_t heads, int64_t d, const float* cos,
                         const float* sin) {
    const int64_t half = d / 2;
    for (int64_t r = 0; r < rows; r++) {
        const float* c = cos + r * d;
        const float* s = sin + r * d;
        for (int64_t head = 0; head < heads; head++) {
            float* x = qk + r * row_stride + head * d;
            for (int64_t i = 0; i < half; i += kLanes) {
                const vf first = load(x + i), second = load(x + half + i);
                store(x + i, first * load(c + i) - second * load(s + i));
                store(x + half + i, second * load(c + half + i) + first * load(s + half + i));
            }
        }
    }
}

// gate (n values) <- silu(gate) * up, silu(x) = x / (1 + exp(-x)); n a multiple of 16
void layer_kernel_silu_mul(float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (int64_t i = 0; i < n; i += kLanes) {
        const vf x = load(gate + i);
        const vf e = exp_nonpositive(x > 0.0f ? -x : x);  // exp(-|x|) <= 1
        const vf sigmoid = x > 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        store(gate + i, x * sigmoid * load(up + i));
    }
}

}  // extern "C"
