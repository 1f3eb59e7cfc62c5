// CpuBackend matmul and LoRA shrink/expand: how the work is split over threads. The
// per-ISA micro-kernels are in matmul_kernels.h.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"

namespace quiver {

namespace {

// Below this many multiply-adds the pool round trip costs more than it saves.
constexpr int64_t kMinParallelMacs = 64 * 1024;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

void CpuBackend::run_matmul(cpu::MatmulFn fn, const cpu::MatmulArgs& a, int64_t rows, int64_t tokens) {
  const int threads = pool_->num_threads();
  if (threads == 1 || rows * tokens * a.k < kMinParallelMacs) {
    fn(a, 0, rows, 0, tokens);
    return;
  }
  // Split output rows so each weight row is streamed once. Units are multiples of 48 rows
  // (a multiple of every micro-tile height and of 16 floats, so threads never share a
  // cache line of y); about 8 per thread for balance. With few rows (LoRA shrink) and
  // enough tokens, split the tokens instead.
  if (rows >= 16 * threads || tokens < 4 * threads) {
    const int64_t unit = std::max<int64_t>(48, round_up((rows + 8 * threads - 1) / (8 * threads), 48));
    run_units((rows + unit - 1) / unit, [&](int64_t u) { fn(a, u * unit, std::min(rows, (u + 1) * unit), 0, tokens); });
  } else {
    const int64_t unit = std::max<int64_t>(4, round_up((tokens + 4 * threads - 1) / (4 * threads), 4));
    run_units((tokens + unit - 1) / unit, [&](int64_t u) { fn(a, 0, rows, u * unit, std::min(tokens, (u + 1) * unit)); });
  }
}

void CpuBackend::matmul(Tensor y, Tensor x, Tensor w, Tensor bias) {
  check(y.dtype == DType::kF32 && x.dtype == DType::kF32, "matmul: x and y must be f32");
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  check(x.ndim == 2 && w.ndim == 2 && w.dim(1) == in && y.dim(0) == n && y.dim(1) == out, "matmul: shape mismatch");
  check(w.layout == WeightLayout::kRows, "matmul: a packed weight takes bf16 x (matmul_x16)");
  if (n == 0 || out == 0) return;
  const cpu::MatmulArgs a{
      .y = y.ptr<float>(), .ldy = out, .x = x.ptr<float>(), .ldx = in, .w = w.data, .ldw = in,
      .bias = bias.empty() ? nullptr : as_f32(bias, out, &weight_scratch_), .k = in, .accumulate = false};
  run_matmul(k_->matmul[cpu_elem_type(w.dtype)], a, out, n);
}

void CpuBackend::matmul_x16(Tensor y, Tensor x16, Tensor w, Tensor bias) {
  check(y.dtype == DType::kF32 && x16.dtype == DType::kBF16 && w.dtype == DType::kBF16,
        "matmul_x16: y must be f32, x16 and w bf16");
  const int64_t n = x16.dim(0), in = x16.dim(1), out = w.dim(0);
  check(x16.ndim == 2 && w.ndim == 2 && w.dim(1) == in && y.dim(0) == n && y.dim(1) == out,
        "matmul_x16: shape mismatch");
  if (n == 0 || out == 0) return;
  if (w.layout == WeightLayout::kBf16Block16) {
    const cpu::MatmulArgs a{.y = y.ptr<float>(), .ldy = out, .x = nullptr, .ldx = in, .w = w.data, .ldw = in,
                            .bias = bias.empty() ? nullptr : as_f32(bias, out, &weight_scratch_), .k = in,
                            .accumulate = false, .x16 = x16.ptr<uint16_t>()};
    run_matmul(bf16_packed_, a, out, n);
    return;
  }
  if (bf16_dot_ == nullptr) {  // the same values, widened for the f32 kernels
    x_scratch_.resize(static_cast<size_t>(n * in));
    k_->to_f32[cpu::kElemBF16](x_scratch_.data(), x16.data, n * in);
    matmul(y, Tensor(x_scratch_.data(), DType::kF32, {n, in}), w, bias);
    return;
  }
  const cpu::MatmulArgs a{.y = y.ptr<float>(), .ldy = out, .x = nullptr, .ldx = in, .w = w.data, .ldw = in,
                          .bias = bias.empty() ? nullptr : as_f32(bias, out, &weight_scratch_), .k = in,
                          .accumulate = false, .x16 = x16.ptr<uint16_t>()};
  run_matmul(bf16_dot_, a, out, n);
}

void CpuBackend::run_lora(cpu::MatmulFn fn, const cpu::MatmulArgs& base, size_t slot_bytes, int64_t rows,
                          int64_t num_slots, const LoraMeta& meta, int64_t num_tokens) {
  // Runs of equal slot: from the host-computed segments when given, else from token_slot.
  const int32_t* slot = meta.token_slot.ptr<int32_t>();
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
  if (segments_.empty()) return;

  // Work units are (segment, block of rows): a segment is a small GEMM against its own
  // adapter slice, and several units per segment keep both threads busy at batch 1.
  const int threads = pool_->num_threads();
  // Units are multiples of 8 rows (the GEMV tile height).
  const int64_t unit_rows = std::max<int64_t>(8, round_up((rows + 2 * threads - 1) / (2 * threads), 8));
  const int64_t units_per_seg = (rows + unit_rows - 1) / unit_rows;
  const int64_t units = units_per_seg * static_cast<int64_t>(segments_.size());
  int64_t tokens = 0;
  for (const auto& s : segments_) tokens += s.len;
  auto run_unit = [&](int64_t u) {
    const LoraSegment& s = segments_[static_cast<size_t>(u / units_per_seg)];
    const int64_t r0 = (u % units_per_seg) * unit_rows;
    cpu::MatmulArgs a = base;
    a.y += s.start * a.ldy;
    a.x += s.start * a.ldx;
    a.w = static_cast<const char*>(base.w) + static_cast<size_t>(s.slot) * slot_bytes;
    fn(a, r0, std::min(rows, r0 + unit_rows), 0, s.len);
  };
  if (threads == 1 || rows * tokens * base.k < kMinParallelMacs / 4) {
    for (int64_t u = 0; u < units; ++u) run_unit(u);
  } else {
    run_units(units, run_unit);
  }
}

void CpuBackend::lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) {
  const int64_t n = x.dim(0), in = x.dim(1), rank = a_stack.dim(1);
  check(t.dtype == DType::kF32 && x.dtype == DType::kF32, "lora_shrink: t and x must be f32");
  check(a_stack.ndim == 3 && a_stack.dim(2) == in && t.dim(0) == n && t.dim(1) == rank, "lora_shrink: shape mismatch");
  check(meta.token_slot.numel() == n, "lora_shrink: token_slot length differs from the tokens");
  const int32_t* slot = meta.token_slot.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) check(slot[i] < a_stack.dim(0), "lora_shrink: slot out of range");
  const cpu::MatmulArgs a{.y = t.ptr<float>(), .ldy = rank, .x = x.ptr<float>(), .ldx = in, .w = a_stack.data,
                          .ldw = in, .bias = nullptr, .k = in, .accumulate = false};
  run_lora(k_->matmul[cpu_elem_type(a_stack.dtype)], a, a_stack.row_bytes(), rank, a_stack.dim(0), meta, n);
}

void CpuBackend::lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) {
  const int64_t n = y.dim(0), out = y.dim(1), rank = b_stack.dim(2);
  check(y.dtype == DType::kF32 && t.dtype == DType::kF32, "lora_expand: y and t must be f32");
  check(b_stack.ndim == 3 && b_stack.dim(1) == out && t.dim(0) == n && t.dim(1) == rank, "lora_expand: shape mismatch");
  check(meta.token_slot.numel() == n, "lora_expand: token_slot length differs from the tokens");
  const int32_t* slot = meta.token_slot.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) check(slot[i] < b_stack.dim(0), "lora_expand: slot out of range");
  const cpu::MatmulArgs a{.y = y.ptr<float>(), .ldy = out, .x = t.ptr<float>(), .ldx = rank, .w = b_stack.data,
                          .ldw = rank, .bias = nullptr, .k = rank, .accumulate = true};
  run_lora(k_->matmul[cpu_elem_type(b_stack.dtype)], a, b_stack.row_bytes(), out, b_stack.dim(0), meta, n);
}

}  // namespace quiver
