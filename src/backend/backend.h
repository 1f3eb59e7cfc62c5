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

#include "backend/step_plan.h"
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

// One layer's paged KV cache: k, v [num_blocks, block_size, num_kv_heads, head_dim] in f32,
// f16, bf16 or fp8 e4m3. An fp8 cache stores value / scale (saturating at +-448) and reads
// stored x scale; the scales are the layer's (vLLM's per-tensor k_scale / v_scale), 1 for
// the other types.
struct KvLayer {
  Tensor k, v;
  float k_scale = 1.f, v_scale = 1.f;
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
  // The tokens in tiles of sorted_tokens that are one-adapter runs (lora_run_tokens), where
  // the host counted them; -1 where it did not (graph buckets, callers without the count).
  // Where it is the token count, the tensor-core LoRA tiles take every token, and the
  // CUDA-core kernels, which would only find those tiles and skip them, are not launched.
  int64_t run_tokens = -1;
};

// LoraMeta::sorted_tokens for per-token slots: the indices 0..n-1 stably sorted by slot,
// -1 (no adapter) last. Written into *order (resized), so a caller can reuse its buffer.
void lora_sorted_tokens(std::span<const int32_t> token_slot, std::vector<int32_t>* order);
// The tokens in tiles of 16 sorted positions (order: lora_sorted_tokens') that are 16
// consecutive tokens on one adapter: the share of a step the tensor-core LoRA tiles take
// (StepShape::lora_run_tokens). A prefill chunk on an adapter is such runs, decode tokens
// of different sequences seldom are.
int64_t lora_run_tokens(std::span<const int32_t> token_slot, std::span<const int32_t> order);

// Up to kMaxGroup projections of one input (q/k/v; gate/up), so a device backend can
// run them, and their LoRA, in one launch each instead of one per projection.
inline constexpr int kMaxGroup = kMaxGroupMembers;
struct MatmulGroup {
  int count = 0;
  Tensor y[kMaxGroup];     // [n, out_g] f32
  Tensor w[kMaxGroup];     // [out_g, in]
  Tensor bias[kMaxGroup];  // [out_g] or empty
  // x already rounded to the plan's x_type ([n, in]), or empty: a backend that rounds x
  // before multiplying then takes this copy instead of converting x again. For x_type
  // e4m3: the codes, with the per-token scales as row_scale (fp8_copy).
  Tensor x16;
};

// The bytes of x's [n, d] e4m3 codes rounded up to 16; an fp8 copy (GroupPlan::x_type
// e4m3, written by the op that writes x) keeps its n f32 row scales from there on.
inline size_t fp8_codes_bytes(int64_t count) { return static_cast<size_t>((count + 15) / 16 * 16); }
inline size_t fp8_copy_bytes(int64_t n, int64_t d) {
  return fp8_codes_bytes(n * d) + sizeof(float) * static_cast<size_t>(n);
}
// The fp8 copy of an [n, d] x laid out in `data` (fp8_copy_bytes(n, d) bytes).
inline Tensor fp8_copy(void* data, int64_t n, int64_t d, Device device) {
  Tensor t(data, DType::kF8E4M3, {n, d}, device);
  t.row_scale = reinterpret_cast<const float*>(static_cast<char*>(data) + fp8_codes_bytes(n * d));
  return t;
}

// The LoRA of a projection group, built once by the model and handed to Backend::project
// and to the op that reads the group's outputs next:
//   y[g][i, :] += b_stack[g][slot_i] @ (a_stack[g][slot_i] @ x[i, :])   for g < count
// for tokens with a slot. count 0: no LoRA. Where the group's plan says
// ExpandKernel::kNextOp, project leaves y as the base product and t holding the shrink,
// and the next op adds the expand before using y, as if project had.
struct GroupLora {
  int count = 0;
  Tensor y[kMaxGroup];        // [n, out_g] f32: the group's outputs
  Tensor a_stack[kMaxGroup];  // [num_slots, max_rank, in]
  Tensor b_stack[kMaxGroup];  // [num_slots, out_g, max_rank] (scale folded in)
  Tensor t;                   // [kMaxGroup, n, max_rank] f32: the shrink's results (scratch)
  LoraMeta meta;
  int64_t rank() const { return count == 0 ? 0 : a_stack[0].dim(1); }
  // Member g's rows of t: [n, max_rank].
  Tensor t_of(int g) const;
};

// The LoRA of embed_tokens and lm_head per slot (lora/slot_vocab.h), persistent device
// tensors in the slot dtype (f32 or bf16), ranks padded to max_rank with zeros:
//   embed_a: [num_slots, width, max_rank]   row t: lora_embedding_A's column t
//   embed_b: [num_slots, hidden, max_rank]  scale folded in
//   head_a:  [num_slots, max_rank, hidden]
//   head_b:  [num_slots, width, max_rank]   scale folded in
//   ranks:   [num_slots, 2] i32: the slot's embed_tokens and lm_head rank (0: none; skipped)
// so that for a token t of slot s the embedding adds embed_b[s] @ embed_a[s][t], and a logits
// row x of slot s adds head_b[s] @ (head_a[s] @ x). Empty tensors: no slot pool.
struct VocabLora {
  Tensor embed_a, embed_b, head_a, head_b, ranks;
  bool empty() const { return ranks.empty(); }
  int64_t max_rank() const { return embed_a.empty() ? 0 : embed_a.dim(2); }
};

// The LoRA slots' vocabulary rows (lora/slot_vocab.h, io/adapter_vocab.h), persistent
// device tensors:
//   embed_rows, lm_head_rows: [num_slots * rows_per_slot, hidden] (slot s: rows s * rows_per_slot ...)
//   lm_head_ids: [num_slots * rows_per_slot] i32, the vocabulary id each lm_head row gives the logit of
//   row_counts:  [num_slots] i32, lm_head rows in use per slot
//   vocab_sizes: [num_slots] i32, base vocabulary + the slot's new tokens
// and the slots' embed_tokens / lm_head LoRA.
struct VocabTables {
  Tensor embed_rows, lm_head_rows, lm_head_ids, row_counts, vocab_sizes;
  int64_t rows_per_slot = 0;
  int64_t base_vocab = 0;
  int64_t width = 0;  // logits row width: base_vocab + the ids an adapter may add
  VocabLora lora;
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

// Rows [row_begin, row_end) of Backend::quantize_fp8_rows on host memory (the host backends' form).
void quantize_fp8_rows_range(Tensor q, Tensor scale, Tensor w, int64_t row_begin, int64_t row_end);

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
  // The accelerator's free memory now, over every process using it (the KV cache is
  // planned from it, engine/memory_plan.h); host backends report none. Called from a
  // thread this backend's device is bound to (bind_thread).
  virtual int64_t device_memory_free() const { return 0; }
  // The rate at which this backend's kernels stream reads from memory over all its
  // threads, measured when called (GB/s; takes about a second): the ceiling a decode step's
  // bytes are held against. 0: the backend does not measure it.
  virtual double measure_read_gbs() { return 0; }

  // ---- memory -------------------------------------------------------------
  // Allocations are 64-byte aligned. free(nullptr) is a no-op.
  virtual void* alloc(size_t bytes) = 0;
  // alloc, every byte 0. Host backends take zero pages from the OS, which the memory
  // counts only once written: a KV cache planned for half the RAM costs nothing until used.
  virtual void* alloc_zeroed(size_t bytes) {
    void* p = alloc(bytes);
    fill_zero(p, bytes);
    return p;
  }
  virtual void free(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  // `rows` rows of `width` bytes, device to device, from src (rows src_pitch bytes apart)
  // to dst (dst_pitch apart). The default copies row by row.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows);
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // t[i] = hash_uniform(seed, i, center, scale) (core/splitmix.h) in t's float dtype, so
  // dummy weights come out bitwise the same on every backend. The default writes host
  // memory; device backends fill in place, with no host copy.
  virtual void fill_uniform(Tensor t, float center, float scale, uint64_t seed);
  virtual void synchronize() {}
  // Makes this backend's device current on the calling thread: a tensor-parallel rank's
  // thread calls it before its first op (parallel/rank_threads.h). Host backends: nothing.
  virtual void bind_thread() {}
  // Makes a host tensor (e.g. an mmap'd weight) usable by ops. Host backends return it
  // unchanged (no copy); device backends upload into memory they own until destruction.
  virtual Tensor import_weight(const Tensor& host) = 0;
  // Frees an import_weight upload before destruction (a weight moved elsewhere). Host
  // backends: nothing (their imports are the caller's memory).
  virtual void release_weight(const Tensor& imported) { (void)imported; }
  // Whether project() multiplies a group's members of one output width as one product where
  // their weights, and their outputs, lie at one stride each: the loader then places q/k/v
  // and gate/up back to back (LlamaWeights::place_groups).
  virtual bool batches_adjacent_members() const { return false; }
  // --quantization fp8 (model/fp8_weights.h), row by row of w ([rows, k] f32/f16/bf16, this
  // backend's memory, row-major): scale[r] = max_k |w[r, k]| / 448 and q[r, k] =
  // e4m3(w[r, k] / scale[r]), IEEE division then nearest even, saturating (0 where the
  // scale is 0); scale[r] is NaN where the row holds a NaN or an infinity. q: F8_E4M3
  // [rows, k], scale: f32 [rows]. Bitwise the same on every backend; the default works
  // on host memory.
  virtual void quantize_fp8_rows(Tensor q, Tensor scale, Tensor w);
  // The layout this backend multiplies a projection weight (q/k/v/o, gate/up/down, and an
  // untied lm_head) fastest in, for an imported weight w. kRows: w is used as it is.
  virtual WeightLayout projection_layout(const Tensor& w) const {
    (void)w;
    return WeightLayout::kRows;
  }
  // Writes w, an imported weight, in projection_layout(w) order into dst (memory of this
  // backend holding w.bytes()) and returns dst's tensor. Only projection weights and an
  // untied lm_head (read by lm_head alone) are packed: the embedding table is read by rows.
  virtual Tensor pack_projection(void* dst, const Tensor& w) {
    (void)dst;
    check(false, name() + " backend: pack_projection without a packed layout");
    return w;
  }

  // ---- the step's plan -----------------------------------------------------
  // Which kernel runs each projection group of a step of this shape (step_plan.h). A pure
  // function of the shape: the same shape gets the same plan, so a graph captured under a
  // plan is replayed under it.
  virtual StepPlan plan(const StepShape& shape) const = 0;

  // ---- the ops of the forward pass ---------------------------------------------
  // plan/lora arguments: the GroupPlan and GroupLora of the projection group whose outputs
  // the op reads; where plan.expand is kNextOp the op first adds lora's expand into those
  // inputs (they then hold y + the LoRA term, as if project had added it).

  // out[i, :] = table[ids[i], :], and extra[ids[i] - vocab, :] for ids past the table (a LoRA
  // slot's rows, VocabTables::embed_rows, whose row ids the engine wrote into ids).
  // out: [n, d] f32; table: [vocab, d]; extra: [rows, d] or empty; ids: [n] i32
  virtual void embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) = 0;

  // The embed_tokens LoRA of each token's slot: out[i, :] += embed_b[s] @ embed_a[s][ids[i], :]
  // for s = token_slot[i] >= 0 whose embed rank is not 0 (VocabLora). ids are the tokens' own
  // ids (not the slot rows embedding reads). Capturable: the grid comes from n.
  // out: [n, hidden] f32; ids, token_slot: [n] i32
  virtual void embedding_lora(Tensor out, Tensor ids, Tensor token_slot, const VocabLora& lora) = 0;

  // out = x / sqrt(mean(x^2) + eps) * w        out, x: [n, d] f32; w: [d]
  // out16: empty, or [n, d] in a 16-bit type: out rounded to it as well, or an fp8 copy
  // (fp8_copy; device backends): out's codes and row scales (the next group's
  // MatmulGroup::x16, when its plan's x_type is not f32).
  virtual void rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) = 0;

  // x += its group's pending expand; residual += x; out = rms_norm(residual, w) (+ out16).
  virtual void add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps,
                            const GroupPlan& plan, const GroupLora& lora) = 0;

  // A projection group: y_g = x @ w_g^T (+ bias_g), plus lora (count > 0), run with the
  // kernels `plan` names. x: [n, in] f32.
  virtual void project(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x) = 0;

  // y = x @ w^T (+ bias)     y: [n, out] f32; x: [n, in] f32; w: [out, in]; bias: [out] or empty.
  // lm_head; the kernel is the one a group of n tokens without LoRA would run.
  virtual void matmul(Tensor y, Tensor x, Tensor w, Tensor bias) = 0;

  // logits = x @ w^T over the final normed rows, w the lm_head (or a shard of it; packed
  // where projection_layout packs it, untied), with the kernel and the rounding of x that a
  // projection group of x.dim(0) tokens without LoRA gets. The default is matmul, which
  // picks that kernel and rounding itself; host backends round x to bf16 here.
  virtual void lm_head(Tensor logits, Tensor x, Tensor w) { matmul(logits, x, w, Tensor()); }

  // Rotate-half RoPE of q and k in place (HF convention: pairs (i, i + head_dim/2)), then
  // token i's rotated k and its v written into cache slot slot_mapping[i] (= block *
  // block_size + offset; -1 skips the token).
  // q: [n, num_heads, head_dim]; k, v: [n, num_kv_heads, head_dim] f32; positions: [n] i32;
  // cos_sin: [max_positions, head_dim] f32, row p = cos(p*f_0..f_{h/2-1}), sin(p*f_0..);
  // cache: the layer's (KvLayer).
  virtual void rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, const KvLayer& cache,
                             Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) = 0;

  // Causal GQA attention through block tables (see AttentionMeta).
  // out, q: [n, num_heads, head_dim] f32; num_heads % num_kv_heads == 0.
  virtual void attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) = 0;

  // Whether the KV cache can be kept in `t` for heads of head_dim (every backend: f32, f16,
  // bf16; fp8 e4m3 where its attention kernels read it).
  virtual bool supports_kv_dtype(DType t, int64_t head_dim) const {
    (void)head_dim;
    return t == DType::kF32 || is_16bit_float(t) || t == DType::kF8E4M3;
  }

  // out = silu(gate) * up (+ out16)     all [n, f] f32
  virtual void silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                        const GroupLora& lora) = 0;

  // out[i, :] = x[rows[i], :]     out: [m, d] f32; x: [n, d] f32; rows: [m] i32
  virtual void gather_rows(Tensor out, Tensor x, Tensor rows) = 0;

  // Logits over each row's own vocabulary (io/adapter_vocab.h). out: [n, t.width] f32;
  // base: [n, t.base_vocab] f32, the base lm_head's logits; x: [n, hidden] f32, lm_head's
  // input rows; row_slot: [n] i32, each row's LoRA slot (-1: the base model).
  //   out[i, c] = base[i, c] for c < base_vocab, -inf from the row's vocab_sizes[slot]
  //   (base_vocab for -1) on; then for j < row_counts[s]: out[i, lm_head_ids[s * R + j]] =
  //   x[i] . lm_head_rows[s * R + j] (R = rows_per_slot); then, where the slot's lm_head rank
  //   is not 0, out[i, :] += head_b[s] @ (head_a[s] @ x[i]) (t.lora, when not empty).
  //   Capturable: the grid comes from n and the tables' shapes, the counts and ranks are read
  //   on the device.
  virtual void vocab_logits(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) = 0;

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
  // Backend::alloc_zeroed.
  static Buffer zeroed(Backend* backend, size_t bytes) {
    Buffer b;
    b.backend_ = backend;
    b.bytes_ = bytes;
    b.ptr_ = backend->alloc_zeroed(bytes);
    return b;
  }
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
  // A tensor view `offset` bytes into the buffer.
  Tensor tensor_at(size_t offset, DType t, std::initializer_list<int64_t> dims) const {
    Tensor v(static_cast<char*>(ptr_) + offset, t, dims, backend_->device());
    check(offset <= bytes_ && v.bytes() <= bytes_ - offset, "tensor view past the end of its buffer");
    return v;
  }
  // An fp8 copy of an [n, d] x (fp8_copy) over the start of the buffer.
  Tensor fp8_copy_view(int64_t n, int64_t d) const {
    check(fp8_copy_bytes(n, d) <= bytes_, "fp8 copy larger than its buffer");
    return fp8_copy(ptr_, n, d, backend_->device());
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
  // --matmul-precision highest: activations are never rounded for a matmul. cuda: cuBLAS
  // matmuls split them into two 16-bit halves for ~f32 accuracy
  // (CudaBackendOptions::gemm_split_activations); host backends multiply f32 activations
  // (otherwise they round them to bf16 for bf16 weights, plan_host_step).
  bool highest_matmul_precision = false;
};
std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string* error);

}  // namespace quiver
