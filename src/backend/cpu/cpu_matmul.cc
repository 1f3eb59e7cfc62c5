// CpuBackend matmul and LoRA shrink/expand: how the work is split over threads. The
// per-ISA micro-kernels are in matmul_kernels.h and cpu_*_avx512bf16.cc.
//
// Every product becomes a MatmulJob of independent units; a projection group runs all its
// members' products and LoRA shrinks as one parallel region and its expands as a second,
// instead of a region per product: a decode step of the 1.1B shape with an adapter on all
// 7 projections had 21 regions a layer, each a wake-up and a join of the pool.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"

namespace quiver {

namespace {

// Below this many multiply-adds the pool round trip costs more than it saves.
constexpr int64_t kMinParallelMacs = 64 * 1024;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

CpuBackend::MatmulJob CpuBackend::plan_matmul(cpu::MatmulFn fn, const cpu::MatmulArgs& a, int64_t rows,
                                              int64_t tokens) const {
  MatmulJob j{.fn = fn, .a = a, .rows = rows, .tokens = tokens};
  const int threads = pool_->num_threads();
  // Split output rows so each weight row is streamed once. Units are multiples of 48 rows
  // (a multiple of every micro-tile height, of the packed layout's 16-row blocks and of 16
  // floats, so threads never share a cache line of y); about 8 per thread for balance.
  // One token: multiples of 128 rows, whole GEMV tiles of the packed kernel's blocks
  // (kGemvNB in cpu_packed_avx512bf16.cc), instead of leaving a 1- or 2-block tail in most
  // units (a 1-block tile is one dependent chain of loads; 0.7% off a batch-1 step, 3 of 3
  // quiet pairs). With few rows and enough tokens, split the tokens instead.
  if (tokens == 1 || rows >= 16 * threads || tokens < 4 * threads) {
    const int64_t step = tokens == 1 ? 128 : 48;
    j.unit = std::max<int64_t>(step, round_up((rows + 8 * threads - 1) / (8 * threads), step));
    j.units = (rows + j.unit - 1) / j.unit;
  } else {
    j.split_tokens = true;
    j.unit = std::max<int64_t>(4, round_up((tokens + 4 * threads - 1) / (4 * threads), 4));
    j.units = (tokens + j.unit - 1) / j.unit;
  }
  return j;
}

CpuBackend::MatmulJob CpuBackend::plan_lora(cpu::MatmulFn fn, const cpu::MatmulArgs& a, size_t slot_bytes,
                                            int64_t rows) const {
  // Units are (segment, block of rows): a segment is a small GEMM against its own adapter
  // slice, and several units per segment keep both threads busy at batch 1. Blocks are
  // multiples of 8 rows (the GEMV tile height).
  MatmulJob j{.fn = fn, .a = a, .rows = rows, .slot_bytes = slot_bytes};
  const int threads = pool_->num_threads();
  j.unit = std::max<int64_t>(8, round_up((rows + 2 * threads - 1) / (2 * threads), 8));
  j.units_per_seg = (rows + j.unit - 1) / j.unit;
  j.units = j.units_per_seg * static_cast<int64_t>(segments_.size());
  for (const auto& s : segments_) j.tokens += s.len;
  return j;
}

void CpuBackend::run_unit(const MatmulJob& j, int64_t u) const {
  if (j.units_per_seg > 0) {
    const LoraSegment& s = segments_[static_cast<size_t>(u / j.units_per_seg)];
    const int64_t r0 = (u % j.units_per_seg) * j.unit;
    cpu::MatmulArgs a = j.a;
    a.y += s.start * a.ldy;
    a.x += s.start * a.ldx;
    a.w = static_cast<const char*>(j.a.w) + static_cast<size_t>(s.slot) * j.slot_bytes;
    j.fn(a, r0, std::min(j.rows, r0 + j.unit), 0, s.len);
  } else if (j.split_tokens) {
    j.fn(j.a, 0, j.rows, u * j.unit, std::min(j.tokens, (u + 1) * j.unit));
  } else {
    j.fn(j.a, u * j.unit, std::min(j.rows, (u + 1) * j.unit), 0, j.tokens);
  }
}

void CpuBackend::run_jobs(std::span<const MatmulJob> jobs) {
  int64_t units = 0, macs = 0;
  for (const MatmulJob& j : jobs) {
    units += j.units;
    macs += j.rows * j.tokens * j.a.k;
  }
  auto run = [&](int64_t u) {
    for (const MatmulJob& j : jobs) {
      if (u < j.units) return run_unit(j, u);
      u -= j.units;
    }
  };
  if (pool_->num_threads() == 1 || macs < kMinParallelMacs) {
    for (int64_t u = 0; u < units; ++u) run(u);
  } else {
    run_units(units, run);
  }
}

void CpuBackend::find_segments(const LoraMeta& meta, int64_t num_tokens, int64_t num_slots) {
  // Runs of equal slot: from the host-computed segments when given, else from token_slot.
  const int32_t* slot = meta.token_slot.ptr<int32_t>();
  check(meta.token_slot.numel() == num_tokens, "lora: token_slot length differs from the tokens");
  for (int64_t i = 0; i < num_tokens; ++i) check(slot[i] < num_slots, "lora: slot out of range");
  segments_.clear();
  if (meta.num_segments > 0 && !meta.seg_start.empty()) {
    const int32_t* ss = meta.seg_start.ptr<int32_t>();
    const int32_t* sl = meta.seg_slot.ptr<int32_t>();
    check(ss[0] == 0 && ss[meta.num_segments] == num_tokens, "lora: segments do not cover the tokens");
    for (int s = 0; s < meta.num_segments; ++s) {
      check(ss[s + 1] >= ss[s] && sl[s] < num_slots, "lora: bad segment");
      if (sl[s] >= 0 && ss[s + 1] > ss[s]) segments_.push_back({ss[s], ss[s + 1] - ss[s], sl[s]});
    }
  } else {
    for (int64_t i = 0; i < num_tokens;) {
      int64_t j = i + 1;
      while (j < num_tokens && slot[j] == slot[i]) ++j;
      if (slot[i] >= 0) segments_.push_back({i, j - i, slot[i]});
      i = j;
    }
  }
}

CpuBackend::MatmulJob CpuBackend::matmul_job(Tensor y, Tensor x, Tensor w, Tensor bias, std::vector<float>* scratch) {
  check(y.dtype == DType::kF32 && x.dtype == DType::kF32, "matmul: x and y must be f32");
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  check(x.ndim == 2 && w.ndim == 2 && w.dim(1) == in && y.dim(0) == n && y.dim(1) == out, "matmul: shape mismatch");
  check(w.layout == WeightLayout::kRows, "matmul: a packed weight takes bf16 x (matmul_x16)");
  const bool i8 = w.dtype == DType::kI8;
  check(!i8 || w.row_scale != nullptr, "matmul: an int8 weight needs its row scales");
  const cpu::MatmulArgs a{.y = y.ptr<float>(), .ldy = out, .x = x.ptr<float>(), .ldx = in, .w = w.data, .ldw = in,
                          .bias = bias.empty() ? nullptr : as_f32(bias, out, scratch), .k = in,
                          .accumulate = false, .w_scale = w.row_scale};
  return plan_matmul(i8 ? k_->matmul_i8 : k_->matmul[cpu_elem_type(w.dtype)], a, out, n);
}

CpuBackend::MatmulJob CpuBackend::matmul_x16_job(Tensor y, Tensor x16, Tensor w, Tensor bias,
                                                 std::vector<float>* scratch) {
  const bool i8 = w.dtype == DType::kI8;
  check(y.dtype == DType::kF32 && x16.dtype == DType::kBF16 && (w.dtype == DType::kBF16 || i8),
        "matmul_x16: y must be f32, x16 bf16, w bf16 or int8");
  check(!i8 || w.row_scale != nullptr, "matmul_x16: an int8 weight needs its row scales");
  const int64_t n = x16.dim(0), in = x16.dim(1), out = w.dim(0);
  check(x16.ndim == 2 && w.ndim == 2 && w.dim(1) == in && y.dim(0) == n && y.dim(1) == out,
        "matmul_x16: shape mismatch");
  check(bf16_dot_ != nullptr, "matmul_x16: no bf16 dot-product kernel (widen x16 first)");
  const bool packed = w.layout == WeightLayout::kBlock16;
  const cpu::MatmulArgs a{.y = y.ptr<float>(), .ldy = out, .x = nullptr, .ldx = in, .w = w.data, .ldw = in,
                          .bias = bias.empty() ? nullptr : as_f32(bias, out, scratch), .k = in,
                          .accumulate = false, .x16 = x16.ptr<uint16_t>(), .w_scale = w.row_scale};
  const cpu::MatmulFn fn = packed ? (i8 ? i8_packed_ : bf16_packed_) : i8 ? i8_dot_ : bf16_dot_;
  return plan_matmul(fn, a, out, n);
}

CpuBackend::MatmulJob CpuBackend::shrink_job(Tensor t, Tensor x, Tensor a_stack) const {
  const int64_t n = x.dim(0), in = x.dim(1), rank = a_stack.dim(1);
  check(t.dtype == DType::kF32 && x.dtype == DType::kF32, "lora_shrink: t and x must be f32");
  check(a_stack.ndim == 3 && a_stack.dim(2) == in && t.dim(0) == n && t.dim(1) == rank, "lora_shrink: shape mismatch");
  const cpu::MatmulArgs a{.y = t.ptr<float>(), .ldy = rank, .x = x.ptr<float>(), .ldx = in, .w = a_stack.data,
                          .ldw = in, .bias = nullptr, .k = in, .accumulate = false};
  return plan_lora(k_->matmul[cpu_elem_type(a_stack.dtype)], a, a_stack.row_bytes(), rank);
}

CpuBackend::MatmulJob CpuBackend::expand_job(Tensor y, Tensor t, Tensor b_stack) const {
  const int64_t n = y.dim(0), out = y.dim(1), rank = b_stack.dim(2);
  check(y.dtype == DType::kF32 && t.dtype == DType::kF32, "lora_expand: y and t must be f32");
  check(b_stack.ndim == 3 && b_stack.dim(1) == out && t.dim(0) == n && t.dim(1) == rank, "lora_expand: shape mismatch");
  const cpu::MatmulArgs a{.y = y.ptr<float>(), .ldy = out, .x = t.ptr<float>(), .ldx = rank, .w = b_stack.data,
                          .ldw = rank, .bias = nullptr, .k = rank, .accumulate = true};
  return plan_lora(k_->matmul[cpu_elem_type(b_stack.dtype)], a, b_stack.row_bytes(), out);
}

void CpuBackend::matmul(Tensor y, Tensor x, Tensor w, Tensor bias) {
  if (x.dim(0) == 0 || w.dim(0) == 0) return;
  const MatmulJob j = matmul_job(y, x, w, bias, &bias_scratch_[0]);
  run_jobs({&j, 1});
}

Tensor CpuBackend::widened(Tensor x16) {
  const int64_t n = x16.dim(0), in = x16.dim(1);
  x_scratch_.resize(static_cast<size_t>(n * in));
  k_->to_f32[cpu::kElemBF16](x_scratch_.data(), x16.data, n * in);
  return Tensor(x_scratch_.data(), DType::kF32, {n, in});
}

void CpuBackend::matmul_x16(Tensor y, Tensor x16, Tensor w, Tensor bias) {
  if (x16.dim(0) == 0 || w.dim(0) == 0) return;
  if (bf16_dot_ == nullptr) return matmul(y, widened(x16), w, bias);
  const MatmulJob j = matmul_x16_job(y, x16, w, bias, &bias_scratch_[0]);
  run_jobs({&j, 1});
}

template <class MakeJob>
void CpuBackend::run_lora(const LoraMeta& meta, int64_t num_tokens, const Tensor& stack, const MakeJob& make) {
  check(stack.ndim == 3, "lora: the slot stack must be [slots, rows, cols]");
  find_segments(meta, num_tokens, stack.dim(0));
  if (segments_.empty()) return;
  const MatmulJob j = make();
  run_jobs({&j, 1});
}

void CpuBackend::lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) {
  run_lora(meta, x.dim(0), a_stack, [&] { return shrink_job(t, x, a_stack); });
}

void CpuBackend::lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) {
  run_lora(meta, y.dim(0), b_stack, [&] { return expand_job(y, t, b_stack); });
}

void CpuBackend::run_group(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x, Tensor x16) {
  const int64_t n = x.dim(0);
  if (n == 0) return;
  // Without the dot-product kernel the rounded x16 is widened once for every member.
  const bool dot16 = !x16.empty() && bf16_dot_ != nullptr;
  const Tensor xm = x16.empty() || dot16 ? x : widened(x16);
  MatmulJob jobs[2 * kMaxGroup];
  int count = 0;
  for (int i = 0; i < g.count; ++i) {
    if (g.w[i].dim(0) == 0) continue;
    jobs[count++] = dot16 ? matmul_x16_job(g.y[i], x16, g.w[i], g.bias[i], &bias_scratch_[i])
                          : matmul_job(g.y[i], xm, g.w[i], g.bias[i], &bias_scratch_[i]);
  }
  bool lora_here = plan.lora();
  if (lora_here) {
    check(lora.count == g.count, "project: the plan runs LoRA, but the group's LoRA has another member count");
    find_segments(lora.meta, n, lora.a_stack[0].dim(0));
    lora_here = !segments_.empty();  // else no token of this step has an adapter
    for (int i = 0; lora_here && i < lora.count; ++i) jobs[count++] = shrink_job(lora.t_of(i), x, lora.a_stack[i]);
  }
  run_jobs({jobs, static_cast<size_t>(count)});
  if (!lora_here || plan.expand != ExpandKernel::kHost) return;
  count = 0;
  for (int i = 0; i < lora.count; ++i) jobs[count++] = expand_job(lora.y[i], lora.t_of(i), lora.b_stack[i]);
  run_jobs({jobs, static_cast<size_t>(count)});
}

}  // namespace quiver
