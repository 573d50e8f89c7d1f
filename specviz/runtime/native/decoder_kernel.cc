// A whole verify forward of the lean decoder on a CPU (fp32) in one call: every layer's norms, linear
// layers, rotary embedding, cache append, tree attention and residuals, then the final norm and the head.
// runtime/native/decoder_kernel.py compiles it once per machine.
//
// The three kernels the lean forward otherwise calls one by one (about 300 torch dispatches and ctypes
// calls a forward, a millisecond or more here) are compiled into this one translation unit and called in
// the same order on the same numbers, so its logits are bitwise the per-call forward's. One more saving:
// the caller may keep each layer's keys transposed between calls (the attention's 16-key tiles), so only
// keys not yet transposed are. The linear layers are the fp32 kernel's grouped weights, or in the gguf mode the
// quantised kernel's blocks (a slot then holds the address of its descriptor, quant::Matrix): the shape says which.

#include "attention_kernel.cc"
#include "layer_kernel.cc"
#include "linear_kernel.cc"
#include "quant_linear_kernel.cc"

#include <algorithm>
#include <vector>

namespace {

// one row of addresses per layer (runtime/native/decoder_kernel.py fills them): the weights, the linear layers'
// grouped weights (linear_kernel.cc), biases (0: none), and the cache's key, value and transposed-key buffers
enum Slot : int { kNorm1, kQkv, kQkvBias, kO, kOBias, kNorm2, kGate, kUp, kDown, kKeys, kValues, kTransposed, kSlots };

// the model's sizes, in this order, and which linear kernel its weights are laid out for (0: linear_kernel.cc's fp32
// groups, 1: quant_linear_kernel.cc's blocks)
struct Shape {
    int64_t hidden, heads, kv_heads, head_dim, intermediate, vocab, quantised;
};

// y (n, N) = x (n, K) W^T + bias through the kernel the model's weights are laid out for
inline void linear(const Shape& s, const float* weight, const float* x, int64_t n, int64_t K, int64_t N,
                   const float* bias, float* y, int threads) {
    if (s.quantised)
        quant_linear_forward(reinterpret_cast<const int64_t*>(weight), x, n, bias, y, threads);
    else
        linear_kernel_forward(x, n, K, weight, N, bias, y, threads);
}

inline const float* slot(const int64_t* slots, int64_t layer, Slot s) {
    return reinterpret_cast<const float*>(slots[layer * kSlots + s]);
}

inline float* slot_out(const int64_t* slots, int64_t layer, Slot s) {
    return reinterpret_cast<float*>(slots[layer * kSlots + s]);
}

// a 64-byte aligned scratch buffer of at least `floats`, kept by the calling thread between forwards
inline float* scratch(std::vector<float>& buffer, int64_t floats) {
    if (buffer.size() < size_t(floats + kAlignSpare)) buffer.resize(floats + kAlignSpare);
    return aligned(buffer.data());
}

// h += y, element by element (what torch's h + y gives, bit for bit)
inline void add_into(float* h, const float* y, int64_t count) {
    for (int64_t i = 0; i < count; i++) h[i] += y[i];
}

void attention(const float* qkv, int64_t n, int64_t past, const Shape& s, const float* keys, const float* values,
               int64_t capacity, float* transposed, int64_t transposed_from, const float* mask, float scale,
               float* out) {
    const int64_t qkv_width = (s.heads + 2 * s.kv_heads) * s.head_dim;
    const Rows q_rows{n, qkv_width, s.head_dim}, out_rows{n, s.heads * s.head_dim, s.head_dim};
    const int64_t groups = s.heads / s.kv_heads, kv_stride = capacity * s.head_dim;
    if (s.head_dim == 64)
        attend<64>(qkv, q_rows, groups, keys, values, kv_stride, s.kv_heads, past + n, mask, scale, out, out_rows,
                   transposed, kv_stride, transposed_from);
    else
        attend<128>(qkv, q_rows, groups, keys, values, kv_stride, s.kv_heads, past + n, mask, scale, out, out_rows,
                    transposed, kv_stride, transposed_from);
}

}  // namespace

extern "C" {

// 0 when the kernel handles a model of these sizes (head size 64 or 128; hidden and intermediate sizes
// multiples of 16, as the norms and the activation take them)
int decoder_kernel_unsupported(const int64_t* shape) {
    const Shape& s = *reinterpret_cast<const Shape*>(shape);
    return (s.head_dim == 64 || s.head_dim == 128) && s.hidden % kLanes == 0 && s.intermediate % kLanes == 0
                   && s.kv_heads > 0 && s.heads % s.kv_heads == 0
               ? 0
               : 1;
}

// h (n, hidden): the embedded tree tokens; on return, the last layer's output. cos, sin (n, head_dim);
// mask (n, past + n) additive; per layer: slots (layers x kSlots addresses), eps, capacity (the cache's
// buffers hold (kv_heads, capacity, head_dim), capacity a multiple of 16; entries past + t for the tree's
// token t are written here) and transposed_from (how many keys the transposed buffer already holds).
// logits (n, vocab) = head(rmsnorm(h, final_norm)).
void decoder_kernel_forward(float* h, int64_t n, int64_t past, const int64_t* slots, const float* eps,
                            const int64_t* capacity, const int64_t* transposed_from, int64_t layers,
                            const int64_t* shape, const float* cos, const float* sin, const float* mask, float scale,
                            const float* final_norm, float final_eps, const float* head, const float* head_bias,
                            float* logits, int threads) {
    const Shape& s = *reinterpret_cast<const Shape*>(shape);
    const int64_t d = s.head_dim, q_heads_width = s.heads * d, qkv_width = (s.heads + 2 * s.kv_heads) * d;
    static thread_local std::vector<float> x_buffer, qkv_buffer, attended_buffer, out_buffer, gate_buffer, up_buffer;
    float* x = scratch(x_buffer, n * s.hidden);
    float* qkv = scratch(qkv_buffer, n * qkv_width);
    float* attended = scratch(attended_buffer, n * q_heads_width);
    float* out = scratch(out_buffer, n * s.hidden);
    float* gate = scratch(gate_buffer, n * s.intermediate);
    float* up = scratch(up_buffer, n * s.intermediate);
    for (int64_t layer = 0; layer < layers; layer++) {
        // rmsnorm, the fused q/k/v, rotary on the q and k heads
        layer_kernel_rmsnorm(h, slot(slots, layer, kNorm1), eps[layer], n, s.hidden, x);
        linear(s, slot(slots, layer, kQkv), x, n, s.hidden, qkv_width, slot(slots, layer, kQkvBias), qkv, threads);
        layer_kernel_rotary(qkv, qkv_width, n, s.heads + s.kv_heads, d, cos, sin);
        // append the tree's keys and values to the cache
        float* keys = slot_out(slots, layer, kKeys);
        float* values = slot_out(slots, layer, kValues);
        const int64_t kv_stride = capacity[layer] * d;
        for (int64_t t = 0; t < n; t++) {
            for (int64_t kv = 0; kv < s.kv_heads; kv++) {
                const float* row = qkv + t * qkv_width + (s.heads + kv) * d;
                std::memcpy(keys + kv * kv_stride + (past + t) * d, row, d * sizeof(float));
                std::memcpy(values + kv * kv_stride + (past + t) * d, row + s.kv_heads * d, d * sizeof(float));
            }
        }
        attention(qkv, n, past, s, keys, values, capacity[layer], slot_out(slots, layer, kTransposed),
                  transposed_from[layer], mask, scale, attended);
        // h += attended W_o; the gated MLP and its residual
        linear(s, slot(slots, layer, kO), attended, n, q_heads_width, s.hidden, slot(slots, layer, kOBias), out, threads);
        add_into(h, out, n * s.hidden);
        layer_kernel_rmsnorm(h, slot(slots, layer, kNorm2), eps[layer], n, s.hidden, x);
        linear(s, slot(slots, layer, kGate), x, n, s.hidden, s.intermediate, nullptr, gate, threads);
        linear(s, slot(slots, layer, kUp), x, n, s.hidden, s.intermediate, nullptr, up, threads);
        layer_kernel_silu_mul(gate, up, n * s.intermediate);
        linear(s, slot(slots, layer, kDown), gate, n, s.intermediate, s.hidden, nullptr, out, threads);
        add_into(h, out, n * s.hidden);
    }
    layer_kernel_rmsnorm(h, final_norm, final_eps, n, s.hidden, x);
    linear(s, head, x, n, s.hidden, s.vocab, head_bias, logits, threads);
}

// The same linear layers alone, as the forward calls them, on n rows of scratch input (tools.profile_forward's
// yardstick: what no change outside the linear layers can remove).
void decoder_kernel_linear_only(int64_t n, const int64_t* slots, int64_t layers, const int64_t* shape,
                                const float* head, const float* head_bias, float* logits, int threads) {
    const Shape& s = *reinterpret_cast<const Shape*>(shape);
    const int64_t q_heads_width = s.heads * s.head_dim, qkv_width = (s.heads + 2 * s.kv_heads) * s.head_dim;
    const int64_t widest = std::max(std::max(s.hidden, qkv_width), std::max(q_heads_width, s.intermediate));
    static thread_local std::vector<float> in_buffer, out_buffer;
    float* in = scratch(in_buffer, n * widest);
    float* out = scratch(out_buffer, n * widest);
    for (int64_t i = 0; i < n * widest; i++) in[i] = 0.5f;
    for (int64_t layer = 0; layer < layers; layer++) {
        linear(s, slot(slots, layer, kQkv), in, n, s.hidden, qkv_width, slot(slots, layer, kQkvBias), out, threads);
        linear(s, slot(slots, layer, kO), in, n, q_heads_width, s.hidden, slot(slots, layer, kOBias), out, threads);
        linear(s, slot(slots, layer, kGate), in, n, s.hidden, s.intermediate, nullptr, out, threads);
        linear(s, slot(slots, layer, kUp), in, n, s.hidden, s.intermediate, nullptr, out, threads);
        linear(s, slot(slots, layer, kDown), in, n, s.intermediate, s.hidden, nullptr, out, threads);
    }
    linear(s, head, in, n, s.hidden, s.vocab, head_bias, logits, threads);
}

}  // extern "C"
