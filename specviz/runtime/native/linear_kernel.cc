// The lean forward's linear layers on a CPU (fp32): y = x W^T + b for the few rows of a draft tree.
// runtime/native/linear_kernel.py lays each weight out once in groups of kTiles x 16 output columns, k-major
// ((N / (16 kTiles), K, 16 kTiles), zero past column N): one group is one sequential stream, and at each
// input index k its kTiles vectors hold the weights of the group's outputs.
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
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "vector_math.h"

namespace {

#if defined(__AVX512F__)
constexpr int kBlockRows = 8;   // 8 x 3 sums, 3 weight vectors and a broadcast: 28 of the 32 vector registers
constexpr int kTiles = 3;
inline vf fmadd(vf a, vf b, vf c) { return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#else
constexpr int kBlockRows = 2;   // fewer, wider-than-native registers elsewhere (AVX2, NEON)
constexpr int kTiles = 2;
inline vf fmadd(vf a, vf b, vf c) { return a * b + c; }
#endif

constexpr int kGroup = kTiles * kLanes;  // output columns per group
constexpr int64_t kPrefetch = 1024;      // floats ahead (4 KB) the weight stream is prefetched

// R rows x the group of outputs starting at column n0: y[r, n] = bias[n] + sum_k x[r, k] w[n, k]
template <int R>
void block(const float* x, int64_t K, const float* group, const float* bias, float* y, int64_t N, int64_t n0) {
    vf sums[R][kTiles];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < kTiles; t++) sums[r][t] = vf{};
    for (int64_t k = 0; k < K; k++) {
        const float* w = group + k * kGroup;
        __builtin_prefetch(w + kPrefetch);
        vf weights[kTiles];
        for (int t = 0; t < kTiles; t++) weights[t] = load(w + t * kLanes);
        for (int r = 0; r < R; r++) {
            const vf xk = splat(x[r * K + k]);
            for (int t = 0; t < kTiles; t++) sums[r][t] = fmadd(xk, weights[t], sums[r][t]);
        }
    }
    for (int t = 0; t < kTiles; t++) {
        const int64_t n = n0 + t * kLanes;
        if (n >= N) break;  // padding columns
        const int64_t valid = N - n < kLanes ? N - n : kLanes;
        for (int r = 0; r < R; r++) {
            vf out = sums[r][t];
            if (bias != nullptr) {
                vf b = vf{};
                std::memcpy(&b, bias + n, valid * sizeof(float));
                out = out + b;
            }
            if (valid == kLanes) store(y + r * N + n, out);
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
