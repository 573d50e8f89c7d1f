// The lean forward's linear layers on a GGUF file's own quantised weights (the `gguf` mode): y = x W^T + b, with W
// in ggml's Q4_0, Q4_1 or Q8_0 blocks of 32 inputs, laid out once by runtime/gguf_blocks.py for this kernel, and x
// quantised per row to 8-bit blocks as llama.cpp does (a scale per 32 inputs: amax / 127, round to nearest).
//
// Layout (gguf_blocks.kernel_layout): output rows in groups of 8; per group and block, the 8 rows' quants
// interleaved so that one 32-byte vector holds, for each of the 8 outputs (a 32-bit lane), 4 consecutive inputs:
// Q4 blocks as 4 vectors whose low nibbles are inputs 4v..4v+3 and high nibbles inputs 16+4v..16+4v+3 (ggml's own
// byte order within a block, only interleaved across rows), Q8_0 blocks as 8 vectors of inputs 4c..4c+3. Scales
// stay the file's fp16, in a stream of their own (8 per group and block; Q4_1 then its 8 minimums).
//
// Every output's integer dot product over a block is exact (u8 x s8 products summed in 16 bits where they cannot
// overflow, else 32), then accumulated in fp32 block by block in input order with one fused multiply-add per term,
// whatever the row block: a row's result is bitwise the same however many rows share the call (a tree's root row
// is the one-token step's), and the same again on a processor with VNNI (an exact integer dot, one instruction) and
// in the scalar reference below. The weights of a group (a few KB) are read from memory once and serve every block
// of rows from the core's cache.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define QUANT_AVX2 1
#if defined(SPECVIZ_EMULATE_VNNI) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define QUANT_VNNI 1
#endif
#endif

namespace quant {

constexpr int64_t kBlock = 32;  // inputs per block (every ggml type read here)
constexpr int64_t kGroup = 8;   // output rows per group (one 32-bit lane each)
enum Kind : int64_t { kQ4_0 = 0, kQ4_1 = 1, kQ8_0 = 2 };

// what runtime/gguf_blocks.py hands over, as int64 fields
struct Matrix {
    int64_t kind, out_features, in_features;
    const uint8_t* quants;   // (groups, blocks, quant_bytes(kind))
    const uint16_t* scales;  // (groups, blocks, scale_halves(kind)) fp16
};

inline int64_t quant_bytes(int64_t kind) { return kind == kQ8_0 ? kGroup * kBlock : kGroup * kBlock / 2; }
inline int64_t scale_halves(int64_t kind) { return kind == kQ4_1 ? 2 * kGroup : kGroup; }

// x's rows quantised: q (M, K) int8, per row and block its scale d, d * sum(q) and sum(q)
struct Rows {
    const int8_t* q;
    const float* d;
    const float* ds;
    const int32_t* sum;
    int64_t K, blocks;
};

inline float half_to_float(uint16_t h) {
    // IEEE binary16 -> binary32 (exact), as F16C's vcvtph2ps gives it
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF, bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            exponent = 127 - 15 + 1;
            while (!(mantissa & 0x400)) {
                mantissa <<= 1;
                exponent--;
            }
            bits = sign | (exponent << 23) | ((mantissa & 0x3FF) << 13);
        }
    } else if (exponent == 31) {
        bits = sign | 0x7F800000 | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// One block of 32 of a row: d = amax / 127 (0 for a block of zeros), q = round(x / d) to nearest, ties to even
// (the default rounding mode), its code sum; what every build computes for a row, alone or beside others (max and
// rounding are exact, so the vector version below equals this one bitwise).
inline void quantise_block_scalar(const float* in, int8_t* out, float& d, int32_t& sum) {
    float amax = 0.0f;
    for (int64_t i = 0; i < kBlock; i++) amax = std::fabs(in[i]) > amax ? std::fabs(in[i]) : amax;
    const float scale = amax / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    int32_t total = 0;
    for (int64_t i = 0; i < kBlock; i++) {
        const int32_t v = int32_t(std::nearbyint(in[i] * inverse));
        out[i] = int8_t(v);
        total += v;
    }
    d = scale;
    sum = total;
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
inline void quantise_block(const float* in, int8_t* out, float& d, int32_t& sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], top = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(in + 8 * i);
        top = _mm256_max_ps(top, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_shuffle_ps(half, half, 1));
    const float amax = _mm_cvtss_f32(half);
    const float scale = amax / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    const __m256 factor = _mm256_set1_ps(inverse);
    __m256i codes[4];
    for (int i = 0; i < 4; i++) codes[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], factor));  // nearest, ties even
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(codes[0], codes[1]), _mm256_add_epi32(codes[2], codes[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    // 32-bit codes to bytes in input order (packs works within 128-bit lanes; the permute puts them back)
    const __m256i words = _mm256_packs_epi32(codes[0], codes[1]), words2 = _mm256_packs_epi32(codes[2], codes[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
    d = scale;
    sum = _mm_cvtsi128_si32(t);
}
#else
inline void quantise_block(const float* in, int8_t* out, float& d, int32_t& sum) {
    quantise_block_scalar(in, out, d, sum);
}
#endif

// x (M, K) per row and block: codes q, scales d, d * sum(q), sum(q)
void quantise(const float* x, int64_t M, int64_t K, int8_t* q, float* d, float* ds, int32_t* sum,
              bool scalar = false) {
    const int64_t blocks = K / kBlock;
    for (int64_t r = 0; r < M; r++) {
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t at = r * blocks + b;
            if (scalar) quantise_block_scalar(x + r * K + b * kBlock, q + r * K + b * kBlock, d[at], sum[at]);
            else quantise_block(x + r * K + b * kBlock, q + r * K + b * kBlock, d[at], sum[at]);
            ds[at] = d[at] * float(sum[at]);
        }
    }
}

// The weight code of output o (of the group), input i of a block: the layout above, read back (the reference).
inline int32_t weight_code(const Matrix& w, const uint8_t* block, int64_t o, int64_t i) {
    if (w.kind == kQ8_0) {
        const int64_t c = i / 4, byte = i % 4;
        return int8_t(block[c * 32 + o * 4 + byte]);
    }
    const bool high = i >= 16;
    const int64_t j = high ? i - 16 : i, v = j / 4, byte = j % 4;
    const uint8_t packed = block[v * 32 + o * 4 + byte];
    return high ? packed >> 4 : packed & 0x0F;
}

// one group's 8 outputs for rows [row0, row0 + rows), scalar: the definition every vector path must equal bitwise
void group_reference(const Matrix& w, int64_t g, const Rows& x, int64_t row0, int64_t rows, const float* bias,
                     float* y, int64_t N) {
    const int64_t blocks = x.blocks, qb = quant_bytes(w.kind), sh = scale_halves(w.kind);
    for (int64_t r = row0; r < row0 + rows; r++) {
        for (int64_t o = 0; o < kGroup; o++) {
            const int64_t n = g * kGroup + o;
            if (n >= N) break;
            float acc = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const uint8_t* block = w.quants + (g * blocks + b) * qb;
                const uint16_t* scales = w.scales + (g * blocks + b) * sh;
                const int8_t* xq = x.q + r * x.K + b * kBlock;
                int32_t dot = 0;
                for (int64_t i = 0; i < kBlock; i++) dot += weight_code(w, block, o, i) * int32_t(xq[i]);
                if (w.kind == kQ4_0) dot -= 8 * x.sum[r * blocks + b];
                const float dx = x.d[r * blocks + b];
                acc = std::fma(float(dot), half_to_float(scales[o]) * dx, acc);
                if (w.kind == kQ4_1) acc = std::fma(half_to_float(scales[kGroup + o]), x.ds[r * blocks + b], acc);
            }
            y[r * N + n] = bias != nullptr ? acc + bias[n] : acc;
        }
    }
}

#ifdef QUANT_AVX2

inline __m256i broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

#ifdef QUANT_VNNI
#if defined(SPECVIZ_EMULATE_VNNI)
// what vpdpbusd computes (u8 x s8, four products a lane, summed into 32 bits: exact), for testing this path on a
// processor without it
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00FF)), u_odd = _mm256_srli_epi16(u, 8);
    const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), s_odd = _mm256_srai_epi16(s, 8);
    const __m256i even = _mm256_madd_epi16(_mm256_mullo_epi16(u_even, s_even), ones);
    const __m256i odd = _mm256_madd_epi16(_mm256_mullo_epi16(u_odd, s_odd), ones);
    return _mm256_add_epi32(acc, _mm256_add_epi32(even, odd));
}
constexpr const char* kIsa = "avx2-vnni-emulated";
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
constexpr const char* kIsa = "avx512vnni-256";
#else
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
constexpr const char* kIsa = "avxvnni";
#endif
#else
constexpr const char* kIsa = "avx2";
#endif

constexpr int64_t kMaxRows = 16;  // rows one call of a group takes (their sums: 512 bytes of stack)
constexpr int64_t kAheadBytes = 1024;  // how far ahead of a block the weight stream is prefetched

// y[row0 + r, 8g..8g+7] = acc[r] + bias, for the outputs that exist
inline void store_group(const float* acc, int64_t g, int64_t row0, int64_t rows, const float* bias, float* y,
                        int64_t N) {
    const int64_t n = g * kGroup, valid = N - n < kGroup ? N - n : kGroup;
    for (int64_t r = 0; r < rows; r++) {
        __m256 out = _mm256_load_ps(acc + r * kGroup);
        if (bias != nullptr) {
            float b[kGroup] = {};
            std::memcpy(b, bias + n, valid * sizeof(float));
            out = _mm256_add_ps(out, _mm256_loadu_ps(b));
        }
        if (valid == kGroup) {
            _mm256_storeu_ps(y + (row0 + r) * N + n, out);
        } else {
            float tail[kGroup];
            _mm256_storeu_ps(tail, out);
            std::memcpy(y + (row0 + r) * N + n, tail, valid * sizeof(float));
        }
    }
}

// Rows [row0, row0 + rows) x one group (8 outputs) of a Q4 matrix. Per block the group's 8 weight vectors are
// unpacked once into registers and serve every row; each row's fp32 sums live in acc (L1), so any number of rows
// shares one unpacking (the dot products of a block, 8 vectors, would not fit beside 4 rows' sums in 16 registers).
template <int64_t Kind>
void group_q4(const Matrix& w, int64_t g, const Rows& x, int64_t row0, int64_t rows, const float* bias, float* y,
              int64_t N) {
    const int64_t blocks = x.blocks, sh = scale_halves(Kind);
    const uint8_t* quants = w.quants + g * blocks * quant_bytes(Kind);
    const uint16_t* scales = w.scales + g * blocks * sh;
    const __m256i low = _mm256_set1_epi8(0x0F);
    alignas(32) float acc[kMaxRows * kGroup];
    for (int64_t r = 0; r < rows; r++) _mm256_store_ps(acc + r * kGroup, _mm256_setzero_ps());
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t* block = quants + b * 128;
        // the stream ahead (it runs on into the next group's blocks, which this thread takes next)
        __builtin_prefetch(block + kAheadBytes);
        __builtin_prefetch(block + kAheadBytes + 64);
        if (b % 4 == 0) __builtin_prefetch(scales + b * sh + kAheadBytes / 8);
        __m256i lo[4], hi[4];  // lo[v]: inputs 4v..4v+3 of each output, hi[v]: inputs 16+4v..16+4v+3
        for (int v = 0; v < 4; v++) {
            const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + v * 32));
            lo[v] = _mm256_and_si256(raw, low);
            hi[v] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b * sh)));
        __m256 m = _mm256_setzero_ps();
        if constexpr (Kind == kQ4_1)
            m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b * sh + kGroup)));
        for (int64_t r = 0; r < rows; r++) {
            const int64_t at = (row0 + r) * blocks + b;
            const int8_t* xq = x.q + (row0 + r) * x.K + b * kBlock;
#ifdef QUANT_VNNI
            __m256i whole = _mm256_setzero_si256();
            for (int v = 0; v < 4; v++) {
                whole = dot_u8s8(whole, lo[v], broadcast4(xq + 4 * v));
                whole = dot_u8s8(whole, hi[v], broadcast4(xq + 16 + 4 * v));
            }
#else
            // u8 (0..15) x s8 pairs in 16 bits: 8 such sums a lane reach at most 8 * 2 * 15 * 127 = 30480
            __m256i pairs = _mm256_setzero_si256();
            for (int v = 0; v < 4; v++) {
                pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(lo[v], broadcast4(xq + 4 * v)));
                pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(hi[v], broadcast4(xq + 16 + 4 * v)));
            }
            __m256i whole = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
            if constexpr (Kind == kQ4_0) whole = _mm256_sub_epi32(whole, _mm256_set1_epi32(8 * x.sum[at]));
            __m256 sum = _mm256_load_ps(acc + r * kGroup);
            sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole), _mm256_mul_ps(d, _mm256_set1_ps(x.d[at])), sum);
            if constexpr (Kind == kQ4_1) sum = _mm256_fmadd_ps(m, _mm256_set1_ps(x.ds[at]), sum);
            _mm256_store_ps(acc + r * kGroup, sum);
        }
    }
    store_group(acc, g, row0, rows, bias, y, N);
}

// R rows x one group of a Q8_0 matrix
template <int R>
void group_q8(const Matrix& w, int64_t g, const Rows& x, int64_t row0, const float* bias, float* y, int64_t N) {
    const int64_t blocks = x.blocks;
    const uint8_t* quants = w.quants + g * blocks * quant_bytes(kQ8_0);
    const uint16_t* scales = w.scales + g * blocks * kGroup;
    __m256 acc[R];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t* block = quants + b * 256;
        for (int line = 0; line < 4; line++) __builtin_prefetch(block + kAheadBytes + 64 * line);
        if (b % 4 == 0) __builtin_prefetch(scales + b * kGroup + kAheadBytes / 16);
        __m256i dot[R];
        for (int r = 0; r < R; r++) dot[r] = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const __m256i codes = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + c * 32));
#ifdef QUANT_VNNI
            // s8 codes as u8 (code + 128); the 128 * sum(x) this adds is taken off below
            const __m256i shifted = _mm256_xor_si256(codes, _mm256_set1_epi8(char(0x80)));
            for (int r = 0; r < R; r++)
                dot[r] = dot_u8s8(dot[r], shifted, broadcast4(x.q + (row0 + r) * x.K + b * kBlock + 4 * c));
#else
            // |w| (u8) x x * sign(w) (s8): a pair sums to at most 2 * 128 * 127 = 32512 in 16 bits, then 32
            const __m256i magnitude = _mm256_abs_epi8(codes);
            for (int r = 0; r < R; r++) {
                const __m256i signed_x = _mm256_sign_epi8(broadcast4(x.q + (row0 + r) * x.K + b * kBlock + 4 * c), codes);
                dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x),
                                                                    _mm256_set1_epi16(1)));
            }
#endif
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b * kGroup)));
        for (int r = 0; r < R; r++) {
            const int64_t at = (row0 + r) * blocks + b;
            __m256i whole = dot[r];
#ifdef QUANT_VNNI
            whole = _mm256_sub_epi32(whole, _mm256_set1_epi32(128 * x.sum[at]));
#endif
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole), _mm256_mul_ps(d, _mm256_set1_ps(x.d[at])), acc[r]);
        }
    }
    alignas(32) float sums[R * kGroup];
    for (int r = 0; r < R; r++) _mm256_store_ps(sums + r * kGroup, acc[r]);
    store_group(sums, g, row0, R, bias, y, N);
}

constexpr int kRows = 4;  // Q8_0 rows a block keeps in registers: 4 dot sums, 4 fp32 sums, |w|, w and temporaries

template <int R>
void q8_rows(const Matrix& w, int rows, int64_t g, const Rows& x, int64_t row0, const float* bias, float* y,
             int64_t N) {
    if constexpr (R > 1) {
        if (rows < R) return q8_rows<R - 1>(w, rows, g, x, row0, bias, y, N);
    }
    group_q8<R>(w, g, x, row0, bias, y, N);
}

#else
constexpr const char* kIsa = "generic";
constexpr int kRows = 4;
constexpr int64_t kMaxRows = 16;
#endif

// one group, every row in blocks of as even a size as can be: up to kMaxRows rows share a Q4 block's unpacked
// weights, kRows rows a Q8_0 block's registers
inline void group_all_rows(const Matrix& w, int64_t g, const Rows& x, int64_t M, const float* bias, float* y,
                           int64_t N) {
    const int64_t most = w.kind == kQ8_0 ? kRows : kMaxRows, chunks = (M + most - 1) / most;
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t r0 = M * c / chunks, rows = M * (c + 1) / chunks - r0;
#ifdef QUANT_AVX2
        if (w.kind == kQ4_1) group_q4<kQ4_1>(w, g, x, r0, rows, bias, y, N);
        else if (w.kind == kQ4_0) group_q4<kQ4_0>(w, g, x, r0, rows, bias, y, N);
        else q8_rows<kRows>(w, int(rows), g, x, r0, bias, y, N);
#else
        group_reference(w, g, x, r0, rows, bias, y, N);
#endif
    }
}

struct Scratch {
    std::vector<int8_t> q;
    std::vector<float> d, ds;
    std::vector<int32_t> sum;
};

Rows quantised_rows(const float* x, int64_t M, int64_t K, Scratch& s, bool scalar = false) {
    const int64_t blocks = K / kBlock;
    s.q.resize(M * K);
    s.d.resize(M * blocks);
    s.ds.resize(M * blocks);
    s.sum.resize(M * blocks);
    quantise(x, M, K, s.q.data(), s.d.data(), s.ds.data(), s.sum.data(), scalar);
    return Rows{s.q.data(), s.d.data(), s.ds.data(), s.sum.data(), K, blocks};
}

// y (M, N) = x (M, K) W^T + bias; the groups are split into contiguous runs, one per thread (disjoint outputs)
void forward(const Matrix& w, const float* x, int64_t M, const float* bias, float* y, int threads) {
    static thread_local Scratch scratch;
    const Rows rows = quantised_rows(x, M, w.in_features, scratch);
    const int64_t N = w.out_features, groups = (N + kGroup - 1) / kGroup;
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t index = 0, team = 1;
#ifdef _OPENMP
        index = omp_get_thread_num();
        team = omp_get_num_threads();
#endif
        const int64_t first = groups * index / team, last = groups * (index + 1) / team;
        for (int64_t g = first; g < last; g++) group_all_rows(w, g, rows, M, bias, y, N);
    }
}

}  // namespace quant

extern "C" {

// which instructions this build's dot products use: "avx2", "avx512vnni-256", "avxvnni", "generic", ...
const char* quant_linear_isa() { return quant::kIsa; }

// 0 when a matrix of this kind and input width runs here (a whole number of blocks), else 1
int quant_linear_unsupported(int64_t kind, int64_t in_features) {
    return (kind == quant::kQ4_0 || kind == quant::kQ4_1 || kind == quant::kQ8_0) && in_features > 0
                   && in_features % quant::kBlock == 0
               ? 0
               : 1;
}

// y (M, N) = x (M, K) W^T + bias (N, or null); matrix: the five int64 fields of quant::Matrix
void quant_linear_forward(const int64_t* matrix, const float* x, int64_t M, const float* bias, float* y, int threads) {
    quant::forward(*reinterpret_cast<const quant::Matrix*>(matrix), x, M, bias, y, threads);
}

// the same through the scalar definition (tests and the self-check: every vector path equals it bitwise)
void quant_linear_reference(const int64_t* matrix, const float* x, int64_t M, const float* bias, float* y) {
    const quant::Matrix& w = *reinterpret_cast<const quant::Matrix*>(matrix);
    quant::Scratch scratch;
    const quant::Rows rows = quant::quantised_rows(x, M, w.in_features, scratch, true);
    const int64_t groups = (w.out_features + quant::kGroup - 1) / quant::kGroup;
    for (int64_t g = 0; g < groups; g++) quant::group_reference(w, g, rows, 0, M, bias, y, w.out_features);
}

// x's rows as the kernel quantises them: codes (M, K), and per block the scale (M, K / 32)
void quant_linear_quantise(const float* x, int64_t M, int64_t K, int8_t* q, float* d) {
    std::vector<float> ds(M * (K / quant::kBlock));
    std::vector<int32_t> sum(M * (K / quant::kBlock));
    quant::quantise(x, M, K, q, d, ds.data(), sum.data());
}

}  // extern "C"
