// Backend: the ops the model forward is written against, once, for every device.
// `ref` is the scalar oracle; `cpu` and `cuda` are tested op by op against it.
//
// Conventions for every op:
// - Activations are float32, row-major, contiguous. Weights may be F32, F16 or BF16.
// - All tensors passed to an op live on this backend's device.
// - Ops may run asynchronously on devices that have streams; synchronize() waits.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace quiver {

// Per-step attention metadata (device tensors). Tokens of sequence s are rows
// [query_start[s], query_start[s+1]) of q and are the last q_len positions of that
// sequence: token j of the chunk sits at position seq_lens[s] - q_len + j and attends
// causally to KV positions [0, that position].
struct AttentionMeta {
  Tensor query_start;   // [num_seqs + 1] i32
  Tensor seq_lens;      // [num_seqs] i32: context length including this step's tokens
  Tensor block_tables;  // [num_seqs, max_blocks_per_seq] i32: physical block ids
  int num_seqs = 0;
  int max_query_len = 0;  // host upper bound of q_len over sequences (grid sizing)
  int max_seq_len = 0;    // host upper bound of seq_lens (grid sizing)
};

// Per-step LoRA metadata (device tensors). token_slot[i] is the adapter slot of token i,
// -1 for the base model. Segments are maximal runs of consecutive tokens with the same
// slot, computed on the host once per step; backends may use either form.
struct LoraMeta {
  Tensor token_slot;  // [num_tokens] i32
  Tensor seg_start;   // [num_segments + 1] i32
  Tensor seg_slot;    // [num_segments] i32
  int num_segments = 0;
  // [num_tokens] i32: the token indices ordered by slot (stable), base-model tokens last.
  // Kernels that tile tokens walk this order, so a tile mostly holds one adapter and reads
  // its weights once however the batch interleaves adapters. Empty: 0, 1, 2, ... order.
  Tensor sorted_tokens;
};

// LoraMeta::sorted_tokens for per-token slots: the indices 0..n-1 stably sorted by slot,
// -1 (no adapter) last. Written into *order (resized), so a caller can reuse its buffer.
void lora_sorted_tokens(std::span<const int32_t> token_slot, std::vector<int32_t>* order);

// Up to kMaxGroup projections of one input (q/k/v; gate/up), so a device backend can
// run them, and their LoRA, in one launch each instead of one per projection.
inline constexpr int kMaxGroup = 3;
struct MatmulGroup {
  int count = 0;
  Tensor y[kMaxGroup];     // [n, out_g] f32
  Tensor w[kMaxGroup];     // [out_g, in]
  Tensor bias[kMaxGroup];  // [out_g] or empty
  // x already rounded to the type gemm_input_type names ([n, in]), or empty: a backend
  // that rounds x before multiplying then takes this copy instead of converting x again.
  Tensor x16;
};
struct LoraGroup {
  int count = 0;
  Tensor y[kMaxGroup];        // [n, out_g] f32, updated in place
  Tensor a_stack[kMaxGroup];  // [num_slots, max_rank, in]
  Tensor b_stack[kMaxGroup];  // [num_slots, out_g, max_rank]
};

// A projection's LoRA expand that Backend::project left undone (its `defer`), for the op
// that reads the projection's outputs next to apply first:
//   y[g][i, :] += b_stack[g][slot_i] @ t[g][i, :]   for g < count, tokens with a slot.
// count 0: nothing is pending. rope_kv_write (q, k, v), add_rms_norm_x16 (x) and
// silu_mul_x16 (gate, up) take one whose y are their inputs; after them those inputs hold
// y + the term, as if it had been added before the op. A device backend folds it into the
// op's kernel, which takes a kernel off the decode step's chain per projection group.
struct LoraDelta {
  int count = 0;
  Tensor y[kMaxGroup];        // [n, out_g] f32
  Tensor t[kMaxGroup];        // [n, max_rank] f32: the shrink's results
  Tensor b_stack[kMaxGroup];  // [num_slots, out_g, max_rank]
  LoraMeta meta;
};

// Per-row inputs of Backend::sample (device tensors, one entry per logits row).
struct SampleInputs {
  Tensor temperature;  // [rows] f32: 0 = greedy (the lowest-index argmax)
  Tensor top_k;        // [rows] i32: <= 0 or >= vocab = off
  Tensor top_p;        // [rows] f32: in (0, 1]; 1 = off
  Tensor min_p;        // [rows] f32: 0 = off
  Tensor seed;         // [rows, 2] i32: the 64-bit seed as (low, high) words
  Tensor counter;      // [rows] i32: index of the token being generated in its sequence
  int num_logprobs = 0;  // host K in [0, 20]: top-K entries per row (the max over rows)
  // [rows] i32 or empty: row r's own top-K count (clamped to K); entries past it are written
  // as id -1, logprob -inf, and cost nothing. Lets a graph captured with K = 20 serve rows
  // that want fewer (or none).
  Tensor row_logprobs;
  // Structured outputs: row r chooses only among the tokens whose bit is set in row
  // mask_row[r] of `masks` ([table rows, ceil(vocab / 32)] i32 words; token i is bit i % 32
  // of word i / 32); mask_row[r] < 0, or an empty mask_row, leaves the row unconstrained.
  // Logprobs, ranks and top-K stay those of the raw logits. A mask that allows no token
  // leaves the choice unconstrained (the engine ends such a row instead of sampling it).
  Tensor mask_row;  // [rows] i32
  Tensor masks;     // [table rows, words] i32
};

// Per-row results of Backend::sample (device tensors). Logprobs are of the raw
// log_softmax(logits), before temperature and truncation (what the host sampler and vLLM
// report); ranks and top-K order by (logit descending, index ascending), as logprobs_for.
struct SampleOutputs {
  Tensor token;         // [rows] i32
  Tensor logprob;       // [rows] f32: of `token`
  Tensor rank;          // [rows] i32: 1 = most likely
  Tensor top_ids;       // [rows, K] i32, most likely first (unused when K = 0)
  Tensor top_logprobs;  // [rows, K] f32
};

// Elements [begin, end) of Backend::fill_uniform on host memory (the host backends' form).
void fill_uniform_range(Tensor t, float center, float scale, uint64_t seed, int64_t begin, int64_t end);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // The accelerator's name and memory, for defaults that depend on them (engine_defaults.h);
  // host backends report none.
  virtual std::string device_name() const { return ""; }
  virtual int64_t device_memory_bytes() const { return 0; }

  // ---- memory -------------------------------------------------------------
  // Allocations are 64-byte aligned. free(nullptr) is a no-op.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // t[i] = hash_uniform(seed, i, center, scale) (core/splitmix.h) in t's float dtype, so
  // dummy weights come out bitwise the same on every backend. The default writes host
  // memory; device backends fill in place, with no host copy.
  virtual void fill_uniform(Tensor t, float center, float scale, uint64_t seed);
  virtual void synchronize() {}
  // Makes a host tensor (e.g. an mmap'd weight) usable by ops. Host backends return it
  // unchanged (no copy); device backends upload into memory they own until destruction.
  virtual Tensor import_weight(const Tensor& host) = 0;

  // ---- ops ----------------------------------------------------------------
  // out[i, :] = table[ids[i], :]      out: [n, d] f32; table: [vocab, d]; ids: [n] i32
  virtual void embedding(Tensor out, Tensor table, Tensor ids) = 0;

  // out = x / sqrt(mean(x^2) + eps) * w        out, x: [n, d] f32; w: [d]
  virtual void rms_norm(Tensor out, Tensor x, Tensor w, float eps) = 0;

  // residual += x; out = rms_norm(residual, w)     (fused pre-norm of the next block)
  virtual void add_rms_norm(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) = 0;

  // y = x @ w^T (+ bias)     y: [n, out] f32; x: [n, in] f32; w: [out, in]; bias: [out] or empty
  virtual void matmul(Tensor y, Tensor x, Tensor w, Tensor bias) = 0;

  // Rotate-half RoPE in place (HF convention: pairs (i, i + head_dim/2)).
  // q: [n, num_heads, head_dim]; k: [n, num_kv_heads, head_dim]; positions: [n] i32;
  // cos_sin: [max_positions, head_dim] f32, row p = cos(p*f_0..f_{h/2-1}), sin(p*f_0..)
  virtual void rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) = 0;

  // Writes token i's k/v into the cache slot slot_mapping[i] (= block * block_size + offset);
  // slot -1 skips the token (padding).
  // k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim] (f32, f16 or bf16)
  // k, v: [n, num_kv_heads, head_dim] f32; slot_mapping: [n] i32
  virtual void kv_write(Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) = 0;

  // rope(q, k), then kv_write of the rotated k and of v: the same results, in one pass over
  // this step's q/k/v on a device backend (one kernel fewer per layer). The default runs
  // the two ops.
  // delta (LoraDelta): the q/k/v projections' pending LoRA term, applied first.
  virtual void rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, Tensor k_cache,
                             Tensor v_cache, Tensor slot_mapping, const LoraDelta& delta);

  // Causal GQA attention through block tables (see AttentionMeta).
  // out, q: [n, num_heads, head_dim] f32; num_heads % num_kv_heads == 0.
  virtual void attention(Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, const AttentionMeta& meta,
                         float scale) = 0;

  // out = silu(gate) * up      all [n, f] f32
  virtual void silu_mul(Tensor out, Tensor gate, Tensor up) = 0;

  // y += x   both [n, d] f32
  virtual void add(Tensor y, Tensor x) = 0;

  // out[i, :] = x[rows[i], :]     out: [m, d] f32; x: [n, d] f32; rows: [m] i32
  virtual void gather_rows(Tensor out, Tensor x, Tensor rows) = 0;

  // LoRA shrink: t[i, :] = a_stack[slot_i] @ x[i, :]; rows with slot -1 are left untouched.
  // t: [n, max_rank] f32; x: [n, in] f32; a_stack: [num_slots, max_rank, in]
  virtual void lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) = 0;

  // LoRA expand: y[i, :] += b_stack[slot_i] @ t[i, :]; rows with slot -1 are untouched.
  // y: [n, out] f32; t: [n, max_rank] f32; b_stack: [num_slots, out, max_rank] (scale folded in)
  virtual void lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) = 0;

  // Grouped forms (same results as the single ops, member by member). The defaults call
  // matmul, and lora_shrink into `t` ([n, max_rank] f32 scratch) then lora_expand.
  virtual void matmul_group(const MatmulGroup& g, Tensor x);
  virtual void lora_group(const LoraGroup& g, Tensor x, Tensor t, const LoraMeta& meta);
  // A model projection: matmul_group, then (lora non-null) lora_group on the same members.
  // Device backends may overlap the two (the shrink needs only x). defer (or null): the
  // backend may leave the expand to the op that reads y next, describing it in *defer
  // (count 0 when it did all); the caller then passes *defer to that op. The default never
  // defers.
  virtual void project(const MatmulGroup& g, const LoraGroup* lora, Tensor x, Tensor t, const LoraMeta& meta,
                       LoraDelta* defer);
  // Adds a pending LoRA term into its y tensors (lora_expand per member): how the default
  // ops apply a LoraDelta.
  void apply_lora_delta(const LoraDelta& delta);

  // ---- 16-bit GEMM inputs ---------------------------------------------------
  // The type matmul_group rounds an f32 x of n tokens to before multiplying weights of type
  // w (CUDA's cuBLAS path: w's 16-bit type), or kF32 when it multiplies f32 x directly.
  // When it is 16-bit, the op that produces x can write that copy as well (the *_x16 forms
  // below) and pass it as MatmulGroup::x16: one kernel and one pass over x fewer per
  // projection, and bitwise the same result (the same round-to-nearest-even).
  virtual DType gemm_input_type(int64_t n, DType w) const;
  // rms_norm / add_rms_norm / silu_mul that also write out16 = out rounded to out16's dtype
  // (bf16 or f16). An empty out16 makes them the plain ops on every backend; a copy needs a
  // backend whose gemm_input_type can be 16-bit. delta: the pending LoRA term of the
  // projection that produced x (add_rms_norm_x16) or gate and up (silu_mul_x16), applied
  // first; empty for none.
  virtual void rms_norm_x16(Tensor out, Tensor out16, Tensor x, Tensor w, float eps);
  virtual void add_rms_norm_x16(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps,
                                const LoraDelta& delta);
  virtual void silu_mul_x16(Tensor out, Tensor out16, Tensor gate, Tensor up, const LoraDelta& delta);

  // ---- sampling on the device (GPU sampling inside decode graphs) ----------------------
  // For each of `rows` rows of logits [rows, vocab] f32 picks a token and reports what the
  // engine's logprobs need, so only these small results travel to the host. The rules
  // (top-k, top-p, min-p, greedy ties, counter-based Philox noise) and why every backend
  // computes the same token are in backend/sampling_math.h. Capturable: grid from `rows`
  // only, no allocation, no host reads.
  virtual void sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) = 0;

  // ---- graphs (optional; CUDA graphs on the cuda backend) -----------------------------
  // Between begin_capture() and end_capture() ops are recorded, not run: nothing may
  // allocate, copy to or from the host, or synchronize. replay() runs the recorded ops
  // again with the same arguments: the same device addresses and host integers (shapes,
  // grid bounds), so callers keep every input in persistent buffers, update them in place
  // before replay, and key graphs by every host value that must change. Graph ids are
  // owned by the backend; graphs live until it is destroyed.
  virtual bool supports_graphs() const { return false; }
  // Whether attention kernels exist for this head size (checked when a model is loaded,
  // so an unsupported model is refused with a message instead of failing mid-step).
  virtual bool supports_head_dim(int64_t head_dim) const { return head_dim > 0; }
  virtual void begin_capture() { check(false, name() + " backend does not support graphs"); }
  virtual int end_capture() {
    check(false, name() + " backend does not support graphs");
    return -1;
  }
  virtual void replay(int graph_id) { check(false, name() + " backend does not support graphs"); }
};

// Owning device allocation; moves, never copies.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* backend, size_t bytes) : backend_(backend), bytes_(bytes), ptr_(backend->alloc(bytes)) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      bytes_ = o.bytes_;
      ptr_ = o.ptr_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (ptr_) backend_->free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  // A tensor view over the start of the buffer.
  Tensor tensor(DType t, std::initializer_list<int64_t> dims) const {
    Tensor v(ptr_, t, dims, backend_->device());
    check(v.bytes() <= bytes_, "tensor view larger than its buffer");
    return v;
  }

 private:
  Backend* backend_ = nullptr;
  size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

// Factory: "ref", "cpu" (num_threads <= 0: all cores), "cuda" (when built with QUIVER_CUDA).
struct BackendOptions {
  std::string kind = "cpu";
  int num_threads = 0;
  int cuda_device = 0;
  // cuda only (--matmul-precision highest): cuBLAS matmuls split activations into two 16-bit
  // halves for ~f32 accuracy (CudaBackendOptions::gemm_split_activations). Host backends ignore it.
  bool cuda_split_activations = false;
};
std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string* error);

}  // namespace quiver
