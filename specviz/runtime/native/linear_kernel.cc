// The lean forward's linear layers on a CPU (fp32): y = x W^T + b for the few rows of a draft tree.
// runtime/native/linear_kernel.py lays each weight out once in groups of kTiles x kWidth output columns (kWidth:
// the floats of one vector register), k-major ((N / kGroup, K, kGroup), zero past column N): one group is one
// sequential stream, and at each input index k its kTiles vectors hold the weights of the group's outputs.
//
// A block of up to kBlockRows rows x one group keeps its sums in registers; every weight vector loaded serves
// each row of the block, so a tree of a few tokens reads the weights once, as one token does. Each output
// is summed over k in order, one fused multiply-add at a time, whatever the block: a row's result never
// depends on how many rows share the call (what keeps a tree's root row bitwise the one-token step's).

#include <cstdint>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_FMA)
#include <arm_neon.h>
#endif

#include "vector_math.h"

namespace {

// Registers at the processor's own width (the build's -march, runtime/native/build.py). Each branch sizes the
// block so that its sums, the group's weight vectors and one broadcast row value fill the vector registers
// without spilling: a spilled sum is a store and a load per multiply-add, and then a tree of N rows costs N
// times the weight stream instead of one (what the 16-lane generic code cost on AVX2: 20x stock at 64 rows).
#if defined(__AVX512F__)
typedef float wide __attribute__((vector_size(64)));
constexpr int kWidth = 16;
constexpr int kBlockRows = 8;   // 8 x 3 sums, 3 weight vectors and a broadcast: 28 of the 32 registers
constexpr int kTiles = 3;
constexpr const char* kIsa = "avx512";
inline wide fmadd(wide a, wide b, wide c) { return (wide)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif defined(__AVX2__) && defined(__FMA__)
typedef float wide __attribute__((vector_size(32)));
constexpr int kWidth = 8;
constexpr int kBlockRows = 4;   // 4 x 3 sums, 3 weight vectors and a broadcast: all 16 registers
constexpr int kTiles = 3;
constexpr const char* kIsa = "avx2-fma";
inline wide fmadd(wide a, wide b, wide c) { return (wide)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_FMA)
typedef float wide __attribute__((vector_size(16)));
constexpr int kWidth = 4;
constexpr int kBlockRows = 6;   // 6 x 4 sums, 4 weight vectors and a broadcast: 29 of the 32 registers
constexpr int kTiles = 4;
constexpr const char* kIsa = "neon-fma";
inline wide fmadd(wide a, wide b, wide c) { return (wide)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b); }
#else
typedef float wide __attribute__((vector_size(16)));  // SSE2, or any target GCC vectorises at 128 bits
constexpr int kWidth = 4;
constexpr int kBlockRows = 4;   // 4 x 3 sums, 3 weight vectors and a broadcast: 16 registers
constexpr int kTiles = 3;
constexpr const char* kIsa = "generic";
// a multiply, then an add (ISO C++ mode keeps GCC from fusing them, the same in every block size)
inline wide fmadd(wide a, wide b, wide c) { return a * b + c; }
#endif

inline wide load_wide(const float* p) { wide v; std::memcpy(&v, p, sizeof v); return v; }
inline void store_wide(float* p, wide v) { std::memcpy(p, &v, sizeof v); }
inline wide splat_wide(float x) { return wide{} + x; }

constexpr int kGroup = kTiles * kWidth;  // output columns per group
constexpr int64_t kPrefetch = 1024;      // floats ahead (4 KB) the weight stream is prefetched

// R rows x the group of outputs starting at column n0: y[r, n] = bias[n] + sum_k x[r, k] w[n, k]
template <int R>
void block(const float* x, int64_t K, const float* group, const float* bias, float* y, int64_t N, int64_t n0) {
    wide sums[R][kTiles];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < kTiles; t++) sums[r][t] = wide{};
    for (int64_t k = 0; k < K; k++) {
        const float* w = group + k * kGroup;
        __builtin_prefetch(w + kPrefetch);
        wide weights[kTiles];
        for (int t = 0; t < kTiles; t++) weights[t] = load_wide(w + t * kWidth);
        for (int r = 0; r < R; r++) {
            const wide xk = splat_wide(x[r * K + k]);
            for (int t = 0; t < kTiles; t++) sums[r][t] = fmadd(xk, weights[t], sums[r][t]);
        }
    }
    for (int t = 0; t < kTiles; t++) {
        const int64_t n = n0 + t * kWidth;
        if (n >= N) break;  // padding columns
        const int64_t valid = N - n < kWidth ? N - n : kWidth;
        for (int r = 0; r < R; r++) {
            wide out = sums[r][t];
            if (bias != nullptr) {
                wide b = wide{};
                std::memcpy(&b, bias + n, valid * sizeof(float));
                out = out + b;
            }
            if (valid == kWidth) store_wide(y + r * N + n, out);
            else std::memcpy(y + r * N + n, &out, valid * sizeof(float));
        }
    }
}

template <int R = kBlockRows>
void rows_block(int rows, const float* x, int64_t K, const float* group, const float* bias, float* y, int64_t N,
                int64_t n0) {
    if constexpr (R > 1) {
        if (rows < R) return rows_block<R - 1>(rows, x, K, group, bias, y, N, n0);
    }
    block<R>(x, K, group, bias, y, N, n0);
}

}  // namespace

extern "C" {

// output columns per group of the weight layout (what runtime/native/linear_kernel.py pads to)
int linear_kernel_group_columns() { return kGroup; }

// which register blocking this build runs: "avx512", "avx2-fma", "neon-fma" or "generic"
const char* linear_kernel_isa() { return kIsa; }

// y (M, N) = x (M, K) W^T + bias (N, or null); groups: W as (ceil(N / group), K, group), zero past column N.
// Each thread takes a contiguous run of groups and every row chunk of each, so a group's weights are read
// from memory once and stay in cache across the chunks.
void linear_kernel_forward(const float* x, int64_t M, int64_t K, const float* groups, int64_t N, const float* bias,
                           float* y, int threads) {
    const int64_t count = (N + kGroup - 1) / kGroup;
    const int64_t chunks = (M + kBlockRows - 1) / kBlockRows;  // row chunks of as even a size as can be (7 rows: 4 + 3)
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t g = 0; g < count; g++) {
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t m0 = M * c / chunks, rows = M * (c + 1) / chunks - m0;
            rows_block(int(rows), x + m0 * K, K, groups + g * K * kGroup, bias, y + m0 * N, N, g * kGroup);
        }
    }
}

}  // extern "C"
