// Tree attention for the lean forward on a CPU (fp32): every query row of a verify forward against the
// KV cache and the tree's own entries, with the tree mask. runtime/native/attention_kernel.py compiles it once per
// machine; ATen's scaled_dot_product_attention is used wherever it cannot be.
//
// Query heads that share a key/value head are taken together (kv head h: rows g * n + t for group g, tree
// token t), so each key is read once for all of them; q and the output are read and written in the
// forward's own (token, head, d) layout. Per kv head the keys are first transposed into tiles of kLanes keys
// (d x kLanes: 16 with AVX-512, 8 with AVX2, 4 elsewhere), so a score is a plain FMA chain over d, a vector of
// keys at a time, without horizontal sums. Then per
// block of up to kRows rows (blocks of even size): scores + mask, the row's max, exponentials
// (vector_math.h), and out = sum p_j v_j / sum p_j with j in key order, a masked key contributing exactly
// 0. The buffers the kernel fills are 64-byte aligned.
//
// Every row's result therefore depends only on the keys it may see, in their order, never on where they
// sit or on how many rows share the call: a row's attention in a tree is bitwise what it is alone.

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "vector_math.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

// query rows per block: they share every key and value read. With AVX-512 (32 registers of 16 floats) six rows
// of 64 dims keep the block's accumulators (6 x 4 vectors of the output) in registers, and 128 dims take three;
// with AVX2 (16 registers of 8 floats) two rows of 64 dims (2 x 8 vectors: a few spill, still 10% faster than
// one row here) and one of 128; with 4-float vectors one row of 64 dims already takes 16 registers.
#if defined(__AVX512F__)
template <int kDim>
constexpr int kRows = kDim == 64 ? 6 : 3;
#elif defined(__AVX__)
template <int kDim>
constexpr int kRows = kDim == 64 ? 2 : 1;
#else
template <int kDim>
constexpr int kRows = 1;
#endif
constexpr int kMostRows = kRows<64>;  // the scratch each thread holds serves every head size
constexpr size_t kKeptFloats = 1 << 18;  // 1 MB of transposed keys kept per calling thread

// rows[i] <- column i of the kLanes x kLanes block (log2(kLanes) perfect shuffles of rows i and i + kLanes / 2)
#if defined(__AVX512F__)
constexpr int kShuffleStages = 4;
#define SPECVIZ_INTERLEAVE_LO {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define SPECVIZ_INTERLEAVE_HI {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#elif defined(__AVX__)
constexpr int kShuffleStages = 3;
#define SPECVIZ_INTERLEAVE_LO {0, 8, 1, 9, 2, 10, 3, 11}
#define SPECVIZ_INTERLEAVE_HI {4, 12, 5, 13, 6, 14, 7, 15}
#else
constexpr int kShuffleStages = 2;
#define SPECVIZ_INTERLEAVE_LO {0, 4, 1, 5}
#define SPECVIZ_INTERLEAVE_HI {2, 6, 3, 7}
#endif
inline void transpose_tile(vf* rows) {
    const vi lo = SPECVIZ_INTERLEAVE_LO;
    const vi hi = SPECVIZ_INTERLEAVE_HI;
    for (int stage = 0; stage < kShuffleStages; stage++) {
        vf next[kLanes];
        for (int i = 0; i < kLanes / 2; i++) {
            next[2 * i] = __builtin_shuffle(rows[i], rows[i + kLanes / 2], lo);
            next[2 * i + 1] = __builtin_shuffle(rows[i], rows[i + kLanes / 2], hi);
        }
        for (int i = 0; i < kLanes; i++) rows[i] = next[i];
    }
}

constexpr int kAlignSpare = 16;  // floats a buffer holds past its size, for aligned() (64 bytes, any kLanes)

// the first 64-byte boundary at or after p (a buffer holds kAlignSpare spare floats for it): a vector that
// straddles two cache lines loads at half speed, which cost the scores a quarter of their time
inline float* aligned(float* p) {
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}

inline bool any_lane(vi lanes) {
    const vi none{};
    return std::memcmp(&lanes, &none, sizeof none) != 0;
}

// dot products of `rows` query rows (q: rows x dim) with kChunks x kLanes keys from j0 (kt: tiles, d x kLanes)
template <int kDim, int kChunks, int rows>
inline void dot_chunks(const float* q, const float* kt, int64_t j0, vf dots[][2]) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < kChunks; c++) dots[r][c] = vf{};
    for (int d = 0; d < kDim; d++) {
        vf keys[kChunks];
        for (int c = 0; c < kChunks; c++) keys[c] = load(kt + (j0 + c * kLanes) * kDim + d * kLanes);
        for (int r = 0; r < rows; r++) {
            const float qd = q[r * kDim + d];
            for (int c = 0; c < kChunks; c++) dots[r][c] = mul_add(splat(qd), keys[c], dots[r][c]);
        }
    }
}

// Where packed row r (query head group r / n, tree token r % n) of a kv head lies in a (tokens, heads, d)
// tensor whose first query head of this kv head is at base.
struct Rows {
    int64_t n, token_stride, head_stride;
    int64_t at(int64_t r) const { return (r % n) * token_stride + (r / n) * head_stride; }
};

// rows r0 .. r0 + rows - 1 of one kv head; s: scratch of kRows<kDim> x padded floats, 64-byte aligned. Each
// row's arithmetic is the same whatever `rows` is: a block's size only sets how many rows share each read.
template <int kDim, int rows>
void attend_block(const float* q, Rows q_rows, int64_t r0, const float* kt, int64_t padded, const float* v,
                  int64_t keys, const float* mask, float scale, float* out, Rows out_rows, float* s) {
    const float inf = std::numeric_limits<float>::infinity();
    const int64_t n = q_rows.n;
    alignas(64) float qb[rows * kDim];
    for (int r = 0; r < rows; r++) std::memcpy(qb + r * kDim, q + q_rows.at(r0 + r), kDim * sizeof(float));
    // scores: s[r][j] = q_r . k_j * scale + mask, and each row's largest
    vf best[rows];
    for (int r = 0; r < rows; r++) best[r] = splat(-inf);
    for (int64_t j0 = 0; j0 < padded;) {
        vf dots[rows][2];
        const int chunks = j0 + 2 * kLanes <= padded ? 2 : 1;
        if (chunks == 2) dot_chunks<kDim, 2, rows>(qb, kt, j0, dots);
        else dot_chunks<kDim, 1, rows>(qb, kt, j0, dots);
        for (int r = 0; r < rows; r++) {
            const float* row_mask = mask + ((r0 + r) % n) * keys;
            for (int c = 0; c < chunks; c++) {
                const int64_t j = j0 + c * kLanes;
                vf bias;
                if (j + kLanes <= keys) {
                    bias = load(row_mask + j);
                } else {  // past the last key: masked
                    bias = splat(-inf);
                    for (int64_t i = j; i < keys; i++) bias[i - j] = row_mask[i];
                }
                vf score = dots[r][c] * scale + bias;
                store(s + r * padded + j, score);
                best[r] = vmax(best[r], score);
            }
        }
        j0 += chunks * kLanes;
    }
    // weights: s[r][j] = exp(score - row's largest), exactly 0 for a masked key
    for (int r = 0; r < rows; r++) {
        float* row = s + r * padded;
        const float top = hmax(best[r]);
        for (int64_t j = 0; j < padded; j += kLanes) {
            const vf score = load(row + j);
            store(row + j, score == -inf ? vf{} : exp_nonpositive(score - top));
        }
    }
    // out = sum_j weight_j v_j / sum_j weight_j, both in key order (so a key's position never matters);
    // a vector of keys masked for every row of the block is skipped (a masked key adds exactly 0)
    vf acc[rows][kDim / kLanes];
    float sum[rows];
    for (int r = 0; r < rows; r++) {
        sum[r] = 0.0f;
        for (int c = 0; c < kDim / kLanes; c++) acc[r][c] = vf{};
    }
    for (int64_t j0 = 0; j0 < padded; j0 += kLanes) {
        vi weighted{};
        for (int r = 0; r < rows; r++) weighted |= load(s + r * padded + j0) != 0.0f;
        if (!any_lane(weighted)) continue;
        const int64_t end = j0 + kLanes < keys ? j0 + kLanes : keys;
        for (int64_t j = j0; j < end; j++) {
            const float* vj = v + j * kDim;
            for (int c = 0; c < kDim / kLanes; c++) {
                const vf value = load(vj + c * kLanes);
                for (int r = 0; r < rows; r++) acc[r][c] = mul_add(splat(s[r * padded + j]), value, acc[r][c]);
            }
            for (int r = 0; r < rows; r++) sum[r] += s[r * padded + j];
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < kDim / kLanes; c++) store(out + out_rows.at(r0 + r) + c * kLanes, acc[r][c] / sum[r]);
}

// attend_block for a block of `count` rows (1 .. kRows<kDim>)
template <int kDim, int R = kRows<kDim>>
void attend_rows(int count, const float* q, Rows q_rows, int64_t r0, const float* kt, int64_t padded, const float* v,
                 int64_t keys, const float* mask, float scale, float* out, Rows out_rows, float* s) {
    if constexpr (R > 1) {
        if (count < R) return attend_rows<kDim, R - 1>(count, q, q_rows, r0, kt, padded, v, keys, mask, scale, out,
                                                       out_rows, s);
    }
    attend_block<kDim, R>(q, q_rows, r0, kt, padded, v, keys, mask, scale, out, out_rows, s);
}

// Transposes keys [from, keys) of every kv head into kLanes-key tiles (the tile that holds `from` whole, zero past
// the last key) at kt (kv head h at kt + h * kt_stride, 64-byte aligned), then attends every query row.
// A caller that keeps kt between calls passes how many keys it already holds transposed as `from`.
template <int kDim>
void attend(const float* q, Rows q_rows, int64_t groups, const float* k, const float* v, int64_t kv_stride,
            int64_t kv_heads, int64_t keys, const float* mask, float scale, float* out, Rows out_rows, float* kt,
            int64_t kt_stride, int64_t from) {
    const int64_t rows = groups * q_rows.n;
    // blocks of as even a size as can be (7 rows: 4 + 3, not 6 + 1)
    const int64_t blocks = (rows + kRows<kDim> - 1) / kRows<kDim>, tiles = (keys + kLanes - 1) / kLanes;
    const int64_t padded = tiles * kLanes, first_tile = from / kLanes, new_tiles = tiles - first_tile;
#pragma omp parallel
    {
        static thread_local std::vector<float> scratch;
        scratch.resize(kMostRows * padded + kAlignSpare);
#pragma omp for schedule(static)
        for (int64_t unit = 0; unit < kv_heads * new_tiles; unit++) {
            const int64_t h = unit / new_tiles, j0 = (first_tile + unit % new_tiles) * kLanes;
            const float* head_keys = k + h * kv_stride;
            float* tile = kt + h * kt_stride + j0 * kDim;
            for (int c = 0; c < kDim / kLanes; c++) {
                vf block[kLanes];
                for (int i = 0; i < kLanes; i++)
                    block[i] = j0 + i < keys ? load(head_keys + (j0 + i) * kDim + c * kLanes) : vf{};
                transpose_tile(block);
                for (int i = 0; i < kLanes; i++) store(tile + (c * kLanes + i) * kLanes, block[i]);
            }
        }
#pragma omp for schedule(static)
        for (int64_t unit = 0; unit < kv_heads * blocks; unit++) {
            const int64_t h = unit / blocks, b = unit % blocks;
            const int64_t r0 = rows * b / blocks, count = rows * (b + 1) / blocks - r0;
            attend_rows<kDim>(int(count), q + h * groups * q_rows.head_stride, q_rows, r0, kt + h * kt_stride, padded,
                              v + h * kv_stride, keys, mask, scale, out + h * groups * out_rows.head_stride, out_rows,
                              aligned(scratch.data()));
        }
    }
}

// attend with every key transposed afresh into a buffer of the calling thread's: kv_heads x padded x dim,
// kept between calls up to kKeptFloats (long contexts allocate per call, so many calling threads do not each
// hold megabytes)
template <int kDim>
void attend_all_keys(const float* q, Rows q_rows, int64_t groups, const float* k, const float* v, int64_t kv_stride,
                     int64_t kv_heads, int64_t keys, const float* mask, float scale, float* out, Rows out_rows) {
    const int64_t padded = (keys + kLanes - 1) / kLanes * kLanes;
    static thread_local std::vector<float> transposed;
    transposed.resize(kv_heads * padded * kDim + kAlignSpare);
    attend<kDim>(q, q_rows, groups, k, v, kv_stride, kv_heads, keys, mask, scale, out, out_rows,
                 aligned(transposed.data()), padded * kDim, 0);
    if (transposed.size() > kKeptFloats) {
        transposed.clear();
        transposed.shrink_to_fit();
    }
}

}  // namespace

extern "C" {

// 0 when the kernel handles this head size
int attention_kernel_unsupported(int64_t head_dim) { return head_dim == 64 || head_dim == 128 ? 0 : 1; }

// q, out: (n, kv_heads x groups, head_dim) with any token and head strides (rows of head_dim contiguous);
// k, v: (kv_heads, keys, head_dim), rows contiguous, heads kv_stride floats apart; mask: (n, keys) additive
// (0 or -inf), contiguous
void attention_kernel_attend(const float* q, int64_t q_token_stride, int64_t q_head_stride, int64_t n,
                             int64_t groups, const float* k, const float* v, int64_t kv_stride, int64_t kv_heads,
                             int64_t keys, int64_t head_dim, const float* mask, float scale, float* out,
                             int64_t out_token_stride, int64_t out_head_stride) {
    const Rows q_rows{n, q_token_stride, q_head_stride}, out_rows{n, out_token_stride, out_head_stride};
    if (head_dim == 64) attend_all_keys<64>(q, q_rows, groups, k, v, kv_stride, kv_heads, keys, mask, scale, out, out_rows);
    else if (head_dim == 128) attend_all_keys<128>(q, q_rows, groups, k, v, kv_stride, kv_heads, keys, mask, scale, out, out_rows);
}

}  // extern "C"
