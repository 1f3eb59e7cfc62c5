// CudaBackend: the Backend ops on one NVIDIA GPU. Each op family lives in its own .cu
// file in this folder (embedding, norm, rope, kv_cache, attention, activation, lora, gemm).
//
// Execution model: the backend owns exactly one stream; every op and every device-side
// copy is enqueued on it and returns at once. copy_to_host() and synchronize() wait.
// Nothing an op does allocates, synchronizes or depends on device data read back to the
// host, so a sequence of ops can be captured into a CUDA graph on stream() — with one
// exception: the scratch buffers (matmul activations in 16-bit, attention split-K partials)
// grow on first use, and growing during capture is a bug that check() reports. The graph
// runner runs each bucket's shape eagerly once before capturing it, largest first.
// Once a graph exists, a growing scratch keeps its old allocation alive (captured kernels
// still point there), so eager steps of any size stay safe next to the graphs.
//
// The GPU of `options.device` is made current on the constructing thread; ops must be
// called from threads where it is current (bind_thread: a tensor-parallel rank's thread).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend_factory.h"

namespace quiver {

namespace cuda {
struct ShrinkRows;  // lora_shrink_rows.cuh
}  // namespace cuda

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return device_name_; }
  int64_t device_memory_bytes() const override { return device_memory_bytes_; }
  int64_t device_memory_free() const override;  // cudaMemGetInfo
  double measure_read_gbs() override;            // a device-to-device copy

  // ---- memory (cuda_backend.cu) ----
  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void fill_uniform(Tensor t, float center, float scale, uint64_t seed) override;  // fill.cu
  void synchronize() override;
  void bind_thread() override;
  // cudaMemcpy2DAsync on the stream: one graph node for lm_head's gathered shards.
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) override;
  Tensor import_weight(const Tensor& host) override;
  void release_weight(const Tensor& imported) override;
  bool batches_adjacent_members() const override { return true; }  // gemm.cu
  void quantize_fp8_rows(Tensor q, Tensor scale, Tensor w) override;  // gemm_fp8.cu

  // ---- the plan (step_plan.h: DispatchTable) and the ops (one .cu file per family) ----
  StepPlan plan(const StepShape& shape) const override {
    return plan_device_step(options_.dispatch, shape, options_.gemm_split_activations);
  }
  void embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) override;
  void embedding_lora(Tensor out, Tensor ids, Tensor token_slot, const VocabLora& lora) override;
  void rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) override;  // norm.cu
  void add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps, const GroupPlan& plan,
                    const GroupLora& lora) override;
  void project(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x) override;  // lora.cu
  void matmul(Tensor y, Tensor x, Tensor w, Tensor bias) override;                                      // gemm.cu
  void rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, const KvLayer& cache,
                     Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) override;  // rope.cu
  void attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) override;
  void silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                const GroupLora& lora) override;  // activation.cu
  void gather_rows(Tensor out, Tensor x, Tensor rows) override;
  void vocab_logits(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) override;
  // sampling.cu: one block per row, sort-free thresholds (block_select.cuh)
  void sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) override;

  // ---- graphs (cuda_graphs.cu): stream capture on stream(), replay with cudaGraphLaunch ----
  bool supports_graphs() const override { return true; }
  // The head sizes attention.h dispatches on (AttentionHeadDims; attention.cu).
  bool supports_head_dim(int64_t hd) const override;
  bool supports_kv_dtype(DType t, int64_t head_dim) const override;  // attention.cu
  void begin_capture() override;
  int end_capture() override;
  void replay(int graph_id) override;
  int num_graphs() const { return static_cast<int>(graphs_.size()); }

  // ---- for the CUDA graph runner ----
  cudaStream_t stream() const { return stream_; }
  const CudaBackendOptions& options() const { return options_; }
  int num_sms() const { return num_sms_; }

 private:
  // A device buffer that only ever grows, and never while stream_ is capturing; zeroed
  // when allocated.
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  void* scratch(Scratch& s, size_t bytes, const char* what);
  bool capturing() const;

  // vocab_logits' slot rows: the slots' own lm_head rows' logits (vocab.cu).
  void slot_rows(Tensor out, Tensor x, Tensor row_slot, const VocabTables& t);
  // cuBLAS path of matmul (gemm.cu); the GEMV path is gemv.cu.
  void matmul_cublas(const MatmulGroup& g, Tensor x, cublasHandle_t handle);
  // x rounded to the 16-bit weight type wt in matmul_scratch_, as matmul_cublas multiplies
  // it when no MatmulGroup::x16 is given; *low (when non-null) gets the low terms of the
  // split conversion (options_.gemm_split_activations), else null.
  Tensor convert_for_gemm(Tensor x, DType wt, void** low);
  // The group's matmuls with the kernel `kernel` names, the GEMV launched with programmatic
  // serialisation or not (project() turns it off beside the LoRA shrink, see there).
  void run_matmul(MatmulKernel kernel, const MatmulGroup& g, Tensor x, bool pdl);
  void gemv(const MatmulGroup& g, Tensor x, bool pdl);
  // MatmulKernel::kCublasFp8 and kCublasFp8Outer (gemm_fp8.cu): fp8 weights on cuBLASLt's
  // FP8 GEMM, x quantized per token, the scales by a pass over y or (outer) in the GEMM's
  // epilogue; shapes it does not take (fp8_gemm_fits) on the GEMV, 16 tokens at a time.
  void matmul_fp8(const MatmulGroup& g, Tensor x, bool outer);
  bool fp8_gemm_fits(const MatmulGroup& g, Tensor x) const;
  // The cuBLASLt algorithm of one FP8 GEMM shape, found once (so a shape always runs the same
  // kernel, eager or captured); outer: with outer-vector scales, else unit scales; found:
  // false where cuBLASLt has none (the GEMV runs it). Looked up by (out, n, in, want_outer)
  // in a map: a server meets every token count up to its batch limit, times every
  // projection shape, and each FP8 GEMM looks its shape up.
  struct Fp8Algo {
    bool found = false, outer = false;
    cublasLtMatmulAlgo_t algo{};
  };
  using Fp8Shape = std::tuple<int64_t, int64_t, int64_t, bool>;  // out, n, in, want_outer
  const Fp8Algo& fp8_algo(int64_t out, int64_t n, int64_t in, bool want_outer);
  // The shape checks of a matmul group (gemm.cu).
  void check_group(const MatmulGroup& g, Tensor x) const;
  // The project() kernels (their shrinks write lora.t, the expand left to the next op):
  // - gemv_lora: 1 or 2 tokens, one GEMV launch whose extra blocks compute the shrink
  //   (ShrinkKernel::kFused beside MatmulKernel::kGemv; gemv_lora.cu);
  // - skinny_project: 3..16 tokens with 16-bit or fp8 weights on tensor cores, lora's shrink in
  //   the same launch (kFused beside kSkinny), or the matmul alone (lora null; gemm_skinny.cu);
  // - token_shrink: the shrink alone, one token per block, on `stream` (kTokenRows).
  // Each returns false, with nothing launched, where it does not take the operands; the
  // caller has checked g and x (check_group).
  bool gemv_lora(const MatmulGroup& g, const GroupLora& lora, Tensor x);
  bool skinny_project(const MatmulGroup& g, const GroupLora* lora, Tensor x, bool pdl);
  bool token_shrink(const GroupLora& lora, Tensor x, cudaStream_t stream);
  // The one-token shrink blocks' operands for lora on x (cuda::shrink_rows_args), t being
  // lora.t, and their block count; false where those blocks do not take the operands.
  bool shrink_args(const GroupLora& lora, Tensor x, cuda::ShrinkRows* args);
  // The tiled LoRA (lora.cu): shrink partial sums into lora_scratch_ ([G, chunks, n, R]),
  // and the expand that adds them up and applies B. mma: the one-adapter tiles on tensor
  // cores (ShrinkKernel / ExpandKernel::kTiledMma; the shrink's read x16, x's bf16 copy).
  float* lora_shrink_parts(const GroupLora& g, Tensor x, const Tensor& x16, bool mma, int* chunks,
                           cudaStream_t stream);
  void lora_expand_parts(const GroupLora& g, const float* part, int chunks, int64_t n, bool mma);
  void add_bias(Tensor y, Tensor bias);
  // Kernel attributes set once (norm_lora.cu: the shared-memory delta norm's slab size).
  void init_norm_kernels(int64_t smem_optin_bytes);

  CudaBackendOptions options_;
  int num_sms_ = 0;
  std::string device_name_;
  int64_t device_memory_bytes_ = 0;
  bool pdl_ = false;  // launch the decode-path kernels with programmatic serialisation
  bool clusters_ = false;  // sm_90+: thread block clusters (norm_lora.cu)
  int64_t norm_smem_bytes_ = 0;  // the shared-memory delta norm's largest slab (norm_lora.cu)
  cudaStream_t stream_ = nullptr;
  // LoRA shrink runs here beside the base GEMV (project()); fork_/join_ order it.
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasHandle_t cublas_small_ = nullptr;  // no workspace (MatmulKernel::kCublasSmall)
  cublasLtHandle_t cublas_lt_ = nullptr;     // FP8 GEMMs (MatmulKernel::kCublasFp8), on cublas_workspace_
  std::map<Fp8Shape, Fp8Algo> fp8_algos_;
  void* cublas_workspace_ = nullptr;
  Scratch matmul_scratch_;     // x converted to 16 bits: [n, in] (twice that when split)
  Scratch fp8_scratch_;        // x quantized per token for kCublasFp8: [n, in] e4m3, then [n] f32 scales
  Scratch attention_scratch_;  // split-K partials: [num_seqs, num_heads, max_splits, head_dim + 2] f32
  // Per (sequence, head group) counts of finished decode partitions, i32. Zero between
  // launches: the last partition's block merges them and resets its count (attention.cu).
  Scratch attention_counts_;
  Scratch lora_scratch_;       // LoRA shrink partials: [G, chunks, n, max_rank] f32
  Scratch vocab_lora_scratch_;  // lm_head LoRA shrink: [logits rows, max_rank] f32
  std::vector<void*> weights_;  // import_weight uploads, freed at destruction
  // Instantiated graphs (id = index). Scratch that grows once graphs exist is not freed
  // but retired until destruction: captured kernels keep reading the old addresses.
  std::vector<cudaGraphExec_t> graphs_;
  std::vector<void*> retired_scratch_;
};

}  // namespace quiver
