// One pass over each row of a verify forward's logits: its top-k (values and ids, best first, equal
// values by lower id), its log-normaliser (logsumexp), where asked its entropy, and, per draft node, its
// token's logit and rank under its parent's row. specviz/runtime/native/logit_kernel.py compiles this once per machine and falls back to
// torch where it cannot. GCC's vector extensions keep it portable (AVX-512, AVX2 or NEON: whatever
// -march=native offers). Rows are shared out with OpenMP: built with -fopenmp, this library binds to the
// libgomp torch has already loaded (the same soname), so it runs on torch's own worker threads, which
// are still spinning from the lm-head matmul; threads of its own would have to wait for those.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vector_math.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

constexpr int kBlock = 128;        // a row is scanned in blocks; the top-k lie in the k best blocks
constexpr int kMaxBlocks = 4096;   // vocabularies up to 524,288
constexpr int kMaxK = 64;

// Keep (value, id) in a list sorted best first, at most k long; a value equal to one already held goes
// after it (ids arrive in increasing order, so equal values stay ordered by id).
template <typename Id>
inline void offer(float value, Id id, float* values, Id* ids, int& held, int k) {
    if (held == k && !(value > values[k - 1])) return;
    int at = held < k ? held++ : k - 1;
    while (at > 0 && value > values[at - 1]) {
        values[at] = values[at - 1];
        ids[at] = ids[at - 1];
        at--;
    }
    values[at] = value;
    ids[at] = id;
}

// next: the row this thread summarises after this one (nullptr: none). While this row's exponentials are
// computed (from cache) that row is prefetched, so memory is read during the arithmetic, not only before it.
// kEntropy: also the softmax's entropy, log S - W / S with S = sum e^(x - max), W = sum e^(x - max) (x - max),
// in the same loop (a logit of -inf contributes 0 to W, as p log p does, not 0 x -inf).
template <bool kEntropy>
void summarise_row(const float* row, int64_t vocab, int k, float* top_values, int64_t* top_ids, float* log_norm,
                   float* entropy, const float* next) {
    const int64_t blocks = vocab / kBlock;
    float block_max[kMaxBlocks];
    vf row_max = splat(-INFINITY);
    for (int64_t b = 0; b < blocks; b++) {
        const float* p = row + b * kBlock;
        vf m = load(p);
        for (int j = kLanes; j < kBlock; j += kLanes) m = vmax(m, load(p + j));
        row_max = vmax(row_max, m);
        block_max[b] = hmax(m);
    }
    const float largest = hmax(row_max);

    // A block holding one of the row's k largest values has a maximum at least that large, and at most
    // k - 1 values beat it: the top-k lie in the k blocks with the largest maxima (equal maxima: lower block).
    int64_t best_blocks[kMaxK];
    float best_maxima[kMaxK];
    int held_blocks = 0;
    for (int64_t b = 0; b < blocks; b++) offer(block_max[b], b, best_maxima, best_blocks, held_blocks, k);
    for (int i = 1; i < held_blocks; i++) {  // scan them in id order
        int64_t b = best_blocks[i];
        int j = i;
        for (; j > 0 && best_blocks[j - 1] > b; j--) best_blocks[j] = best_blocks[j - 1];
        best_blocks[j] = b;
    }
    int held = 0;
    for (int i = 0; i < held_blocks; i++) {
        const float* p = row + best_blocks[i] * kBlock;
        for (int j = 0; j < kBlock; j++) offer(p[j], best_blocks[i] * kBlock + j, top_values, top_ids, held, k);
    }

    vf sum0 = splat(0.0f), sum1 = splat(0.0f), weighted0 = splat(0.0f), weighted1 = splat(0.0f);
    const vf shift = splat(largest), floor = splat(-1e30f);
    const float* ahead = next != nullptr ? next : row;  // no next row: touch this one (cached) instead
    for (int64_t j = 0; j < vocab; j += 2 * kLanes) {
        __builtin_prefetch(ahead + j, 0, 2);
        __builtin_prefetch(ahead + j + kLanes, 0, 2);
        const vf d0 = load(row + j) - shift, d1 = load(row + j + kLanes) - shift;
        const vf e0 = exp_nonpositive(d0), e1 = exp_nonpositive(d1);
        sum0 += e0;
        sum1 += e1;
        if constexpr (kEntropy) {
            weighted0 += e0 * vmax(d0, floor);
            weighted1 += e1 * vmax(d1, floor);
        }
    }
    sum0 += sum1;
    float sum = 0.0f;
    for (int l = 0; l < kLanes; l++) sum += sum0[l];
    *log_norm = largest + std::log(sum);
    if constexpr (kEntropy) {
        weighted0 += weighted1;
        float weighted = 0.0f;
        for (int l = 0; l < kLanes; l++) weighted += weighted0[l];
        *entropy = std::log(sum) - weighted / sum;
    }
}

// A node's token logit under its parent's row, and its rank there: its place in the row's top-k when
// it is there, else how many of the row's logits are larger (a pass over the row, still in cache).
void rank_in_row(const float* row, int64_t vocab, const int64_t* top, int k, int64_t token, float* token_logit,
                 int64_t* rank) {
    const float logit = row[token];
    *token_logit = logit;
    for (int j = 0; j < k; j++)
        if (top[j] == token) {
            *rank = j;
            return;
        }
    const vf threshold = splat(logit);
    vi larger = vi{};
    for (int64_t j = 0; j < vocab; j += kLanes) larger -= load(row + j) > threshold;  // a true lane is -1
    int64_t count = 0;
    for (int l = 0; l < kLanes; l++) count += larger[l];
    *rank = count;
}

}  // namespace

extern "C" {

// The shapes this kernel takes (the caller checks before calling): 0 if it can summarise rows of this
// vocabulary to their top-k.
int logit_kernel_unsupported(int64_t vocab, int k) {
    return vocab % (2 * kBlock) != 0 || vocab / kBlock > kMaxBlocks || k < 1 || k > kMaxK || vocab / kBlock < k;
}

// Every row's top-k and logsumexp (and its entropy where entropies is not null); with parents and tokens (per node of a tree whose node i is row i: its
// parent's row and its token; node 0, the root, has neither) also each draft node's token logit, rank and
// probability (exp(logit - the row's logsumexp), in double), computed while its parent's row is in cache.
// tokens, token_logits, ranks and token_probs are indexed by node; the caller checks that every parent and
// token lies inside the logits.
void logit_kernel_summarise(const float* logits, int64_t rows, int64_t vocab, int k, float* top_values,
                            int64_t* top_ids, float* log_norms, int threads, const int64_t* parents,
                            const int64_t* tokens, float* token_logits, int64_t* ranks, double* token_probs,
                            float* entropies) {
    // the draft nodes grouped by parent row (a counting sort): row r's children are
    // child_nodes[child_start[r] .. child_start[r + 1])
    std::vector<int64_t> child_start, child_nodes;
    if (parents != nullptr) {
        child_start.assign(rows + 1, 0);
        child_nodes.resize(rows);
        for (int64_t node = 1; node < rows; node++) child_start[parents[node] + 1]++;
        for (int64_t r = 0; r < rows; r++) child_start[r + 1] += child_start[r];
        std::vector<int64_t> fill(child_start.begin(), child_start.end() - 1);
        for (int64_t node = 1; node < rows; node++) child_nodes[fill[parents[node]]++] = node;
    }
    #pragma omp parallel num_threads(threads) if (threads > 1 && rows > 1)
    {
        // each thread a contiguous run of rows, so it knows which row comes next
        int64_t first = 0, last = rows;
#ifdef _OPENMP
        const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
        first = rows * me / team;
        last = rows * (me + 1) / team;
#endif
        for (int64_t r = first; r < last; r++) {
            const float* row = logits + r * vocab;
            const float* next = r + 1 < last ? row + vocab : nullptr;
            if (entropies != nullptr)
                summarise_row<true>(row, vocab, k, top_values + r * k, top_ids + r * k, log_norms + r, entropies + r, next);
            else
                summarise_row<false>(row, vocab, k, top_values + r * k, top_ids + r * k, log_norms + r, nullptr, next);
            if (parents == nullptr) continue;
            for (int64_t i = child_start[r]; i < child_start[r + 1]; i++) {
                const int64_t node = child_nodes[i];
                rank_in_row(row, vocab, top_ids + r * k, k, tokens[node], token_logits + node, ranks + node);
                token_probs[node] = std::exp(double(token_logits[node]) - double(log_norms[r]));
            }
        }
    }
}

}  // extern "C"
