// The lean forward's linear layers on a CPU (fp32): y = x W^T + b for the few rows of a draft tree.
// runtime/native/linear_kernel.py lays each weight out once in groups of kTiles x kWidth output columns (kWidth: the
// floats of one vector register), k-major ((N / group, K, group), zero past column N): a group is one sequential
// stream of kTiles vectors per input index k.
//
// A block of up to R rows x G adjacent groups keeps its sums in registers; every weight vector loaded serves each
// row of the block, so a tree of a few tokens reads the weights once, as one token does. The block's shape follows
// the rows (measured on the model's layers: docs/benchmarks.md, "The verify forward against the roofline"). With
// AVX-512 groups are one vector wide: up to 8 rows run 3 groups at once (three streams keep more memory requests in
// flight), up to 14 rows run 2 groups in one pass (the weights read once, where two blocks of 7 read them twice), more
// rows take turns in blocks of 8 rows x 3 groups with the groups in cache. Elsewhere a group is 3 or 4 vectors and
// blocks take one group (what measured best with 16 registers). Where rows take turns, the first block streams the
// unit's weights from memory (bound by bandwidth, the FMA units half idle) and the second, which finds them in
// cache, prefetches the next unit's into L2, so that unit's first block computes from cache too: the weight stream
// runs under the arithmetic instead of beside it.
// Each output is summed over k in order, one fused multiply-add at a time, whatever the block: a row's result
// never depends on how many rows share the call (what keeps a tree's root row bitwise the one-token step's).

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

// Registers at the processor's own width (the build's -march, runtime/native/build.py). The block sizes keep the
// sums, the groups' weight vectors and one broadcast row value within the vector registers: a spilled sum is a
// store and a load per multiply-add, and then a tree of N rows costs N times the weight stream instead of one
// (what the 16-lane generic code cost on AVX2: 20x stock at 64 rows). Small blocks: kSmallRows x kSmallGroups
// groups; mid blocks (up to kMidRows rows): kMidGroups groups; larger trees take turns in small blocks.
#if defined(__AVX512F__)
typedef float wide __attribute__((vector_size(64)));
constexpr int kWidth = 16, kTiles = 1;
constexpr int kSmallRows = 8, kSmallGroups = 3;  // 24 sums, 3 weight vectors and a broadcast: 28 of 32 registers
constexpr int kMidRows = 14, kMidGroups = 2;     // 28 sums, 2 weight vectors and a broadcast: 31
constexpr const char* kIsa = "avx512";
inline wide fmadd(wide a, wide b, wide c) { return (wide)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif defined(__AVX2__) && defined(__FMA__)
typedef float wide __attribute__((vector_size(32)));
constexpr int kWidth = 8, kTiles = 3;
constexpr int kSmallRows = 4, kSmallGroups = 1;  // 4 x 3 sums, 3 weight vectors and a broadcast: all 16 registers
constexpr int kMidRows = kSmallRows, kMidGroups = 1;
constexpr const char* kIsa = "avx2-fma";
inline wide fmadd(wide a, wide b, wide c) { return (wide)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#elif defined(__ARM_NEON) && defined(__ARM_FEATURE_FMA)
typedef float wide __attribute__((vector_size(16)));
constexpr int kWidth = 4, kTiles = 4;
constexpr int kSmallRows = 6, kSmallGroups = 1;  // 6 x 4 sums, 4 weight vectors and a broadcast: 29 of 32 registers
constexpr int kMidRows = kSmallRows, kMidGroups = 1;
constexpr const char* kIsa = "neon-fma";
inline wide fmadd(wide a, wide b, wide c) { return (wide)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b); }
#else
typedef float wide __attribute__((vector_size(16)));  // SSE2, or any target GCC vectorises at 128 bits
constexpr int kWidth = 4, kTiles = 3;
constexpr int kSmallRows = 4, kSmallGroups = 1;  // 4 x 3 sums, 3 weight vectors and a broadcast: 16 registers
constexpr int kMidRows = kSmallRows, kMidGroups = 1;
constexpr const char* kIsa = "generic";
// a multiply, then an add (ISO C++ mode keeps GCC from fusing them, the same in every block size)
inline wide fmadd(wide a, wide b, wide c) { return a * b + c; }
#endif

inline wide load_wide(const float* p) { wide v; std::memcpy(&v, p, sizeof v); return v; }
inline void store_wide(float* p, wide v) { std::memcpy(p, &v, sizeof v); }
inline wide splat_wide(float x) { return wide{} + x; }

constexpr int kGroup = kTiles * kWidth;  // output columns per group
constexpr int64_t kPrefetch = kSmallGroups > 1 ? 512 : 1024;  // floats ahead prefetched: 2 KB of each stream, or 4 KB of one

// R rows x the G groups from group g0: y[r, n] = bias[n] + sum_k x[r, k] w[n, k]. kAhead: prefetch the next G
// groups (the next unit's weights) into L2, line for line as this block reads its own, instead of its own ahead.
template <int R, int G, bool kAhead>
void block(const float* x, int64_t K, const float* groups, int64_t g0, const float* bias, float* y, int64_t N) {
    constexpr int V = G * kTiles;  // weight vectors per k: vector t is tile t % kTiles of group t / kTiles
    const float* streams[G];
    for (int g = 0; g < G; g++) streams[g] = groups + (g0 + g) * K * kGroup;
    wide sums[R][V];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < V; t++) sums[r][t] = wide{};
    for (int64_t k = 0; k < K; k++) {
        wide weights[V];
        for (int g = 0; g < G; g++) {
            if (kAhead) {
                for (int l = 0; l < kGroup; l += 16) __builtin_prefetch(streams[g] + (G * K + k) * kGroup + l, 0, 2);
            } else {
                __builtin_prefetch(streams[g] + k * kGroup + kPrefetch);
            }
            for (int t = 0; t < kTiles; t++) weights[g * kTiles + t] = load_wide(streams[g] + k * kGroup + t * kWidth);
        }
        for (int r = 0; r < R; r++) {
            const wide xk = splat_wide(x[r * K + k]);
            for (int t = 0; t < V; t++) sums[r][t] = fmadd(xk, weights[t], sums[r][t]);
        }
    }
    for (int t = 0; t < V; t++) {
        const int64_t n = g0 * kGroup + t * kWidth;
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

// `rows` (at most R) rows x G groups
template <int G, int R, bool kAhead = false>
void rows_block(int rows, const float* x, int64_t K, const float* groups, int64_t g0, const float* bias, float* y,
                int64_t N) {
    if constexpr (R > 1) {
        if (rows < R) return rows_block<G, R - 1, kAhead>(rows, x, K, groups, g0, bias, y, N);
    }
    block<R, G, kAhead>(x, K, groups, g0, bias, y, N);
}

// M rows in blocks of at most R rows (of as even a size as can be: 7 rows of R = 4 are 4 + 3), G groups at a
// time. Each thread takes a contiguous run of G-group units (disjoint outputs) and every row block of each, so a
// unit's weights come from memory once and stay in cache across the blocks; the second block of a unit prefetches
// the thread's next unit, never another thread's (its core's cache) nor past the weights.
template <int G, int R>
void blocks(const float* x, int64_t M, int64_t K, const float* groups, int64_t N, const float* bias, float* y,
            int threads) {
    const int64_t count = (N + kGroup - 1) / kGroup, units = (count + G - 1) / G, chunks = (M + R - 1) / R;
    const int64_t whole = count / G;  // units of G groups (the last may hold fewer)
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t index = 0, team = 1;
#ifdef _OPENMP
        index = omp_get_thread_num();
        team = omp_get_num_threads();
#endif
        const int64_t first = units * index / team, last = units * (index + 1) / team;
        for (int64_t u = first; u < last; u++) {
            for (int64_t c = 0; c < chunks; c++) {
                const int64_t m0 = M * c / chunks, rows = M * (c + 1) / chunks - m0;
                if (u < whole) {
                    if (c == 1 && u + 1 < last && u + 1 < whole)
                        rows_block<G, R, true>(int(rows), x + m0 * K, K, groups, u * G, bias, y + m0 * N, N);
                    else
                        rows_block<G, R>(int(rows), x + m0 * K, K, groups, u * G, bias, y + m0 * N, N);
                } else {  // the last groups, fewer than G
                    for (int64_t g = u * G; g < count; g++)
                        rows_block<1, R>(int(rows), x + m0 * K, K, groups, g, bias, y + m0 * N, N);
                }
            }
        }
    }
}

}  // namespace

extern "C" {

// output columns per group of the weight layout (what runtime/native/linear_kernel.py pads to)
int linear_kernel_group_columns() { return kGroup; }

// which register blocking this build runs: "avx512", "avx2-fma", "neon-fma" or "generic"
const char* linear_kernel_isa() { return kIsa; }

// y (M, N) = x (M, K) W^T + bias (N, or null); groups: W as (ceil(N / group), K, group), zero past column N.
void linear_kernel_forward(const float* x, int64_t M, int64_t K, const float* groups, int64_t N, const float* bias,
                           float* y, int threads) {
    if (M > kSmallRows && M <= kMidRows) blocks<kMidGroups, kMidRows>(x, M, K, groups, N, bias, y, threads);
    else blocks<kSmallGroups, kSmallRows>(x, M, K, groups, N, bias, y, threads);
}

}  // extern "C"
