// What this processor can do at best, measured by two probes (runtime/native/roofline_probe.py):
// - a streaming read of a buffer much larger than the caches, split across threads: memory bandwidth;
// - fused multiply-adds on vectors of the build's width (the width the linear kernel runs), enough independent
//   chains per thread to cover the FMA latency: the arithmetic peak.
// Nothing here runs in a forward; `python -m specviz dev roofline` compares the forwards with these bounds.

// the linear kernel's own vector type and fused multiply-add (wide, fmadd, kWidth): the peak measured is the
// peak of the instructions the forward runs
#include "linear_kernel.cc"

namespace {

// independent accumulator chains per thread: FMA latency (4-5 cycles) x FMA ports (2) with room to spare
constexpr int kChains = 12;

}  // namespace

extern "C" {

// floats per vector of this build
int roofline_probe_width() { return kWidth; }

// the sum of n floats (n a multiple of 64), read once, threads splitting the buffer into contiguous parts
float roofline_probe_read(const float* data, int64_t n, int threads) {
    float total = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+ : total) if (threads > 1)
    {
        int index = 0, count = 1;
#ifdef _OPENMP
        index = omp_get_thread_num();
        count = omp_get_num_threads();
#endif
        const int64_t blocks = n / (4 * kWidth);
        const int64_t first = blocks * index / count, last = blocks * (index + 1) / count;
        wide sums[4] = {};
        for (int64_t b = first; b < last; b++) {
            for (int i = 0; i < 4; i++) {
                wide v;
                std::memcpy(&v, data + (b * 4 + i) * kWidth, sizeof v);
                sums[i] += v;
            }
        }
        wide all = sums[0] + sums[1] + sums[2] + sums[3];
        for (int l = 0; l < kWidth; l++) total += all[l];
    }
    return total;
}

// iterations x kChains fused multiply-adds of kWidth lanes on each of `threads` threads; returns a value
// that depends on every one of them (so none is optimised away)
float roofline_probe_fma(int64_t iterations, int threads) {
    float total = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+ : total) if (threads > 1)
    {
        wide chains[kChains];
        for (int c = 0; c < kChains; c++) chains[c] = wide{} + 1.0f + 0.001f * c;
        const wide a = wide{} + 0.999999f, b = wide{} + 1e-7f;
        for (int64_t i = 0; i < iterations; i++) {
            for (int c = 0; c < kChains; c++) chains[c] = fmadd(chains[c], a, b);
        }
        wide all = wide{};
        for (int c = 0; c < kChains; c++) all += chains[c];
        for (int l = 0; l < kWidth; l++) total += all[l];
    }
    return total;
}

// FMAs each probe call runs per iteration and thread
int roofline_probe_chains() { return kChains; }

}  // extern "C"
