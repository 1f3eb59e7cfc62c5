// CpuBackend: SIMD (AVX-512 / AVX2 / portable scalar, picked once at run time) and
// multi-threaded ops. Kernels live in per-ISA tables (cpu_kernels.h); this class owns the
// thread pool and decides how work is split. Tested op by op against RefBackend.
// Like the pool it owns, a CpuBackend serves one calling thread at a time (ops reuse
// member scratch buffers).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/host_backend.h"
#include "core/thread_pool.h"

namespace quiver {

enum class CpuIsa : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };

std::string_view cpu_isa_name(CpuIsa isa);
// The widest kernel set this CPU (and OS) supports.
CpuIsa best_cpu_isa();

class CpuBackend : public HostBackend {
 public:
  // num_threads <= 0: one per hardware thread. isa = kAuto picks best_cpu_isa(); a
  // forced ISA the CPU lacks falls back to the best supported one below it, so tests can
  // run the AVX2 and scalar paths on an AVX-512 machine.
  // round_x16: HostBackend's. The bf16 dot-product kernel runs those matmuls where the
  // CPU has AVX512-BF16 and the kernel set is avx512; elsewhere x16 is widened to f32.
  explicit CpuBackend(int num_threads, CpuIsa isa = CpuIsa::kAuto, bool round_x16 = true);

  std::string name() const override { return "cpu"; }
  CpuIsa isa() const { return isa_; }
  bool has_bf16_dot() const { return bf16_dot_ != nullptr; }
  ThreadPool& pool() { return *pool_; }

  // Large blocks (weights, KV) are asked to be backed by transparent huge pages, which a
  // kernel in THP's madvise mode gives no one otherwise: a batch-1 step streams 2 GB of
  // weights, half a million 4 KiB pages. Step min 31.3 and 32.1 ms against 32.8 and 32.4
  // on 4 KiB pages (1.1B shape, two quiet pairs; ahead in 4 of 5 pairs by tok/s).
  void* alloc(size_t bytes) override { return huge_pages(HostBackend::alloc(bytes), bytes); }
  void* alloc_zeroed(size_t bytes) override { return huge_pages(HostBackend::alloc_zeroed(bytes), bytes); }
  void fill_uniform(Tensor t, float center, float scale, uint64_t seed) override;  // over the pool
  // bf16 projections whose x the plan rounds to bf16 are packed for the AVX512-BF16 kernel
  // where the CPU has it (packed_weights.h): on the 2-core Zen 5, 128 tokens run at
  // 904-925 GFLOP/s against 578-597 for the row-major dot-product kernel (88-90% of the
  // cores' measured vdpbf16ps peak), 16 tokens 1.4-1.7x faster, one token at 67-70
  // against 51-59 GB/s (bench_cpu_matmul; bench/RESULTS.md).
  WeightLayout projection_layout(const Tensor& w) const override;
  Tensor pack_projection(void* dst, const Tensor& w) override;  // over the pool
  // The best of 5 passes of stream_sum over 1 GiB (32x the L3 of the 2-core Zen 4 machine
  // the CPU numbers come from), a contiguous share per thread, each share first touched by
  // the thread that reads it.
  double measure_read_gbs() override;

  void embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) override;
  void rms_norm_f32(Tensor out, Tensor x, Tensor w, float eps) override;
  void add_rms_norm_f32(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) override;
  void matmul(Tensor y, Tensor x, Tensor w, Tensor bias) override;
  void matmul_x16(Tensor y, Tensor x16, Tensor w, Tensor bias) override;
  void round_to_16bit(Tensor out16, Tensor x) override;
  void rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) override;
  void kv_write(const KvLayer& cache, Tensor k, Tensor v, Tensor slot_mapping) override;
  void attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) override;
  void silu_mul_f32(Tensor out, Tensor gate, Tensor up) override;
  void gather_rows(Tensor out, Tensor x, Tensor rows) override;
  void vocab_rows(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) override;
  void lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) override;
  void lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) override;
  // The members' products and LoRA shrinks as one parallel region, the expands as another.
  void run_group(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x, Tensor x16) override;
  // ref_sampling.cc per row, rows split over the threads (cpu_sampling.cc)
  void sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) override;

 private:
  // A run of consecutive tokens sharing one adapter slot (>= 0).
  struct LoraSegment {
    int64_t start, len;
    int32_t slot;
  };

  // fn(begin, end, thread) over [0, n); inline when n * cost_per_item is too small to be
  // worth waking the pool.
  template <class F>
  void parallel(int64_t n, int64_t cost_per_item, int64_t grain, const F& fn);
  // fn(unit) for every unit in [0, units), handed out to the threads from a shared
  // counter: a thread that starts late (or is preempted on a busy machine) takes fewer
  // units instead of holding up the whole op, as a static split would.
  template <class F>
  void run_units(int64_t units, const F& fn);
  // One product split into independent units: output rows (or tokens when there are too
  // few rows), or for LoRA (segment of segments_, block of rows), the weight slice at the
  // segment's slot.
  struct MatmulJob {
    cpu::MatmulFn fn = nullptr;
    cpu::MatmulArgs a{};
    int64_t rows = 0, tokens = 0;
    int64_t unit = 0, units = 0;  // rows or tokens per unit; how many units
    bool split_tokens = false;
    size_t slot_bytes = 0;        // LoRA: one slot's slice of the stack
    int64_t units_per_seg = 0;    // > 0: a LoRA job over segments_
  };
  MatmulJob plan_matmul(cpu::MatmulFn fn, const cpu::MatmulArgs& a, int64_t rows, int64_t tokens) const;
  MatmulJob plan_lora(cpu::MatmulFn fn, const cpu::MatmulArgs& a, size_t slot_bytes, int64_t rows) const;
  void run_unit(const MatmulJob& j, int64_t u) const;
  // Every unit of every job in one parallel region (inline when the work is too small).
  void run_jobs(std::span<const MatmulJob> jobs);
  // lora_shrink / lora_expand: make()'s job over the segments of meta, if any.
  template <class MakeJob>
  void run_lora(const LoraMeta& meta, int64_t num_tokens, const Tensor& stack, const MakeJob& make);
  // segments_ of a LoRA step's tokens, checking the slots.
  void find_segments(const LoraMeta& meta, int64_t num_tokens, int64_t num_slots);
  // The jobs of the primitives (checked shapes; bias widened into `scratch`).
  MatmulJob matmul_job(Tensor y, Tensor x, Tensor w, Tensor bias, std::vector<float>* scratch);
  // Needs the bf16 dot-product kernel; without it x16 is widened() for matmul_job.
  MatmulJob matmul_x16_job(Tensor y, Tensor x16, Tensor w, Tensor bias, std::vector<float>* scratch);
  // x16's values as f32 in x_scratch_, for the f32 kernels.
  Tensor widened(Tensor x16);
  MatmulJob shrink_job(Tensor t, Tensor x, Tensor a_stack) const;
  MatmulJob expand_job(Tensor y, Tensor t, Tensor b_stack) const;
  static void* huge_pages(void* p, size_t bytes);
  // f32 view of a small per-feature vector (norm weight, bias): converted into scratch
  // unless it already is f32.
  const float* as_f32(const Tensor& t, int64_t n, std::vector<float>* scratch);

  CpuIsa isa_;
  const cpu::CpuKernels* k_;
  cpu::MatmulFn bf16_dot_ = nullptr;     // the AVX512-BF16 matmul, where the CPU has it
  cpu::MatmulFn bf16_packed_ = nullptr;  // the same on packed weights
  cpu::MatmulFn i8_dot_ = nullptr;       // the same on int8 weights
  cpu::MatmulFn i8_packed_ = nullptr;    // the same on packed int8 weights
  std::unique_ptr<ThreadPool> pool_;
  std::vector<float> weight_scratch_;
  std::vector<float> bias_scratch_[kMaxGroup];  // a group's biases widened to f32
  std::vector<float> x_scratch_;  // matmul_x16's widened x without the dot-product kernel
  std::vector<float> attn_scratch_;
  std::vector<float> vocab_x_, vocab_y_;  // vocab_logits: one slot's rows of x and their logits
  std::vector<LoraSegment> segments_;
};

// Kernel-table index of a floating dtype (checks it is one).
int cpu_elem_type(DType t);

template <class F>
void CpuBackend::parallel(int64_t n, int64_t cost_per_item, int64_t grain, const F& fn) {
  // Below ~32k element-ops a pool round trip (about a microsecond) costs more than it saves.
  constexpr int64_t kMinParallelWork = 32 * 1024;
  if (n <= 0) return;
  if (pool_->num_threads() == 1 || n * cost_per_item < kMinParallelWork || n <= grain) {
    fn(int64_t{0}, n, 0);
    return;
  }
  pool_->parallel_for(n, fn, grain);
}

template <class F>
void CpuBackend::run_units(int64_t units, const F& fn) {
  const int threads = pool_->num_threads();
  if (threads == 1 || units <= 1) {
    for (int64_t u = 0; u < units; ++u) fn(u);
    return;
  }
  std::atomic<int64_t> next{0};
  pool_->parallel_for(
      threads,
      [&](int64_t, int64_t, int) {
        for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < units;) fn(u);
      },
      1);
}

}  // namespace quiver
