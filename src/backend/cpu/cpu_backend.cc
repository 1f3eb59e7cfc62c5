// CpuBackend: kernel-set dispatch and the row-wise ops (embedding, norms, RoPE, KV
// writes, activations). Matmul/LoRA live in cpu_matmul.cc, attention in cpu_attention.cc.
#include "backend/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/packed_weights.h"

namespace quiver {

namespace {

bool cpu_has(CpuIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    default:
      return true;
  }
#else
  return isa == CpuIsa::kScalar || isa == CpuIsa::kAuto;
#endif
}

// The bf16 kernels (*_avx512bf16.cc) also use AVX512-VBMI's byte lookups (the int8 groups'
// widening): every CPU with AVX512-BF16 has it but Intel's Cooper Lake, which keeps the
// AVX-512 f32 kernels.
bool cpu_has_bf16_dot() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

const cpu::CpuKernels& kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return cpu::avx512_kernels();
    case CpuIsa::kAvx2: return cpu::avx2_kernels();
    default: return cpu::scalar_kernels();
  }
}

void check_rows(const Tensor& t, int64_t n, int64_t d, const char* what) {
  check(t.dtype == DType::kF32 && t.ndim == 2 && t.dim(0) == n && t.dim(1) == d, what);
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

CpuIsa best_cpu_isa() {
  if (cpu_has(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_has(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

int cpu_elem_type(DType t) {
  switch (t) {
    case DType::kF32: return cpu::kElemF32;
    case DType::kF16: return cpu::kElemF16;
    case DType::kBF16: return cpu::kElemBF16;
    case DType::kI32:
    case DType::kF8E4M3:
    case DType::kI8: break;
  }
  check(false, "cpu backend: expected a floating dtype (F32, F16 or BF16)");
  return 0;
}

CpuBackend::CpuBackend(int num_threads, CpuIsa isa, bool round_x16)
    : HostBackend(round_x16), pool_(std::make_unique<ThreadPool>(num_threads)) {
  const CpuIsa best = best_cpu_isa();
  if (isa == CpuIsa::kAuto || static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  isa_ = isa;
  k_ = &kernels_for(isa_);
  if (isa_ == CpuIsa::kAvx512 && cpu_has_bf16_dot()) {
    bf16_dot_ = cpu::avx512bf16_matmul_bf16_dot();
    bf16_packed_ = cpu::avx512bf16_matmul_bf16_packed();
    i8_dot_ = cpu::avx512bf16_matmul_i8_dot();
    i8_packed_ = cpu::avx512bf16_matmul_i8_packed();
  }
}

void* CpuBackend::huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes < 2 * kHuge || p == nullptr) return p;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return p;
}

WeightLayout CpuBackend::projection_layout(const Tensor& w) const {
  // int8 weights (with their row scales) pack like bf16: the kernel widens them to bf16.
  const bool element = w.dtype == DType::kBF16 || (w.dtype == DType::kI8 && w.row_scale != nullptr);
  const bool packable = w.ndim == 2 && element && w.layout == WeightLayout::kRows &&
                        cpu::packable_block16(w.dim(0), w.dim(1));
  return packable && bf16_packed_ != nullptr && rounds_x16() ? WeightLayout::kBlock16 : WeightLayout::kRows;
}

Tensor CpuBackend::pack_projection(void* dst, const Tensor& w) {
  check(projection_layout(w) == WeightLayout::kBlock16, "cpu backend: this weight is not packed");
  const int64_t k = w.dim(1);
  const bool i8 = w.dtype == DType::kI8;
  parallel(w.dim(0) / cpu::kPackRows, cpu::kPackRows * k, 1, [&](int64_t b, int64_t e, int) {
    if (i8) cpu::pack_block16(static_cast<int8_t*>(dst), w.ptr<int8_t>(), k, b, e);
    else cpu::pack_block16(static_cast<uint16_t*>(dst), w.ptr<uint16_t>(), k, b, e);
  });
  Tensor t(dst, w.dtype, {w.dim(0), k});
  t.layout = WeightLayout::kBlock16;
  // The scales stay where they are, in memory of their own (model/int8_weights.cc,
  // model/fp8_weights.h).
  t.row_scale = w.row_scale;
  return t;
}

const float* CpuBackend::as_f32(const Tensor& t, int64_t n, std::vector<float>* scratch) {
  check(t.numel() == n, "cpu backend: per-feature vector has the wrong length");
  if (t.dtype == DType::kF32) return t.ptr<float>();
  scratch->resize(static_cast<size_t>(n));
  k_->to_f32[cpu_elem_type(t.dtype)](scratch->data(), t.data, n);
  return scratch->data();
}

void CpuBackend::fill_uniform(Tensor t, float center, float scale, uint64_t seed) {
  pool_->parallel_for(t.numel(), [&](int64_t b, int64_t e, int) { fill_uniform_range(t, center, scale, seed, b, e); },
                      int64_t{1} << 16);
}

double CpuBackend::measure_read_gbs() {
  constexpr int64_t kFloats = int64_t{1} << 28;  // 1 GiB
  constexpr int64_t kGrain = 4096;                // 16 KiB: whole pages per thread
  Buffer buf(this, kFloats * sizeof(float));
  float* x = static_cast<float*>(buf.data());
  pool_->parallel_for(kFloats, [&](int64_t b, int64_t e, int) { std::fill(x + b, x + e, 1.f); }, kGrain);
  std::vector<float> sums(static_cast<size_t>(pool_->num_threads()));
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_->parallel_for(kFloats, [&](int64_t b, int64_t e, int t) {
      sums[static_cast<size_t>(t)] += k_->stream_sum(x + b, e - b);
    }, kGrain);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(kFloats * sizeof(float)) / s / 1e9);
  }
  volatile float sink = std::accumulate(sums.begin(), sums.end(), 0.f);  // the reads are used
  (void)sink;
  return best;
}

void CpuBackend::round_to_16bit(Tensor out16, Tensor x) {
  check(x.dtype == DType::kF32 && is_16bit_float(out16.dtype) && out16.numel() == x.numel(),
        "round_to_16bit: x must be f32, out16 16-bit of x's size");
  const auto round = k_->from_f32[cpu_elem_type(out16.dtype)];
  auto* o = static_cast<uint16_t*>(out16.data);
  parallel(x.numel(), 1, 4096, [&](int64_t b, int64_t e, int) { round(o + b, x.ptr<float>() + b, e - b); });
}

void CpuBackend::embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) {
  const int64_t n = out.dim(0), d = out.dim(1), vocab = table.dim(0);
  check_rows(out, n, d, "embedding: out must be [n, d] f32");
  check(table.ndim == 2 && table.dim(1) == d && ids.numel() == n, "embedding: shape mismatch");
  check(extra.empty() || (extra.ndim == 2 && extra.dim(1) == d), "embedding: extra rows of another width");
  const int64_t rows = extra.empty() ? 0 : extra.dim(0);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) check(id[i] >= 0 && id[i] < vocab + rows, "embedding: id out of range");
  parallel(n, d, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const Tensor& t = id[i] < vocab ? table : extra;
      const int64_t row = id[i] < vocab ? id[i] : id[i] - vocab;
      k_->to_f32[cpu_elem_type(t.dtype)](out.ptr<float>() + i * d,
                                         static_cast<const char*>(t.data) + row * d * dtype_size(t.dtype), d);
    }
  });
}

void CpuBackend::rms_norm_f32(Tensor out, Tensor x, Tensor w, float eps) {
  const int64_t n = x.dim(0), d = x.dim(1);
  check_rows(x, n, d, "rms_norm: x must be [n, d] f32");
  check_rows(out, n, d, "rms_norm: out must match x");
  const float* wf = as_f32(w, d, &weight_scratch_);
  parallel(n, d, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float* xr = x.ptr<float>() + i * d;
      // As the reference (HF): x * rsqrt(mean(x^2) + eps) in f32, then weight * that.
      const float inv = 1.0f / std::sqrt(static_cast<float>(k_->sum_squares(xr, d) / d) + eps);
      k_->scale_mul(out.ptr<float>() + i * d, xr, inv, wf, d);
    }
  });
}

void CpuBackend::add_rms_norm_f32(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) {
  const int64_t n = x.dim(0), d = x.dim(1);
  check_rows(x, n, d, "add_rms_norm: x must be [n, d] f32");
  check_rows(residual, n, d, "add_rms_norm: residual must match x");
  check_rows(out, n, d, "add_rms_norm: out must match x");
  const float* wf = as_f32(w, d, &weight_scratch_);
  parallel(n, d, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* rr = residual.ptr<float>() + i * d;
      k_->add(rr, x.ptr<float>() + i * d, d);  // the row is still in L1 for the norm
      const float inv = 1.0f / std::sqrt(static_cast<float>(k_->sum_squares(rr, d) / d) + eps);
      k_->scale_mul(out.ptr<float>() + i * d, rr, inv, wf, d);
    }
  });
}

void CpuBackend::rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) {
  const int64_t n = q.dim(0), hd = q.dim(2), half = hd / 2;
  check(q.dtype == DType::kF32 && k.dtype == DType::kF32 && k.dim(0) == n && k.dim(2) == hd && hd % 2 == 0,
        "rope: q, k must be [n, heads, head_dim] f32");
  check(cos_sin.dtype == DType::kF32 && cos_sin.dim(1) == hd && positions.numel() == n, "rope: bad table or positions");
  const int32_t* pos = positions.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) check(pos[i] >= 0 && pos[i] < cos_sin.dim(0), "rope: position beyond the table");
  const int64_t qh = q.dim(1), kh = k.dim(1);
  parallel(n, (qh + kh) * hd, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float* cs = cos_sin.ptr<float>() + pos[i] * hd;
      for (int64_t h = 0; h < qh; ++h) k_->rope(q.ptr<float>() + (i * qh + h) * hd, cs, cs + half, half);
      for (int64_t h = 0; h < kh; ++h) k_->rope(k.ptr<float>() + (i * kh + h) * hd, cs, cs + half, half);
    }
  });
}

void CpuBackend::kv_write(const KvLayer& cache, Tensor k, Tensor v, Tensor slot_mapping) {
  const Tensor k_cache = cache.k, v_cache = cache.v;
  const int64_t n = k.dim(0), row = k.dim(1) * k.dim(2);
  check(k.dtype == DType::kF32 && v.dtype == DType::kF32 && v.numel() == k.numel(), "kv_write: k, v must be f32");
  check(k_cache.dtype == v_cache.dtype && k_cache.numel() == v_cache.numel(), "kv_write: k/v caches differ");
  check(k_cache.dim(2) * k_cache.dim(3) == row && slot_mapping.numel() == n, "kv_write: shape mismatch");
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  const int32_t* slots = slot_mapping.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) check(slots[i] < num_slots, "kv_write: slot out of range");
  const size_t row_bytes = static_cast<size_t>(row) * dtype_size(k_cache.dtype);
  // A row into the cache: the kernel table's rounding, or for fp8 value / scale, as the
  // reference divides.
  const bool fp8 = k_cache.dtype == DType::kF8E4M3;
  const auto store = fp8 ? nullptr : k_->from_f32[cpu_elem_type(k_cache.dtype)];
  const auto put = [&](void* cache_base, int32_t slot, const float* src, float scale) {
    char* dst = static_cast<char*>(cache_base) + slot * row_bytes;
    if (!fp8) return store(dst, src, row);
    for (int64_t j = 0; j < row; ++j) reinterpret_cast<uint8_t*>(dst)[j] = f32_to_e4m3(src[j] / scale);
  };
  parallel(n, 2 * row, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      if (slots[i] < 0) continue;  // padding token
      put(k_cache.data, slots[i], k.ptr<float>() + i * row, cache.k_scale);
      put(v_cache.data, slots[i], v.ptr<float>() + i * row, cache.v_scale);
    }
  });
}

void CpuBackend::silu_mul_f32(Tensor out, Tensor gate, Tensor up) {
  const int64_t n = out.numel();
  check(gate.numel() == n && up.numel() == n, "silu_mul: size mismatch");
  constexpr int64_t kChunk = 1024;  // elements per parallel unit (a multiple of every vector width)
  parallel((n + kChunk - 1) / kChunk, kChunk, 1, [&](int64_t b, int64_t e, int) {
    const int64_t lo = b * kChunk, hi = std::min(n, e * kChunk);
    k_->silu_mul(out.ptr<float>() + lo, gate.ptr<float>() + lo, up.ptr<float>() + lo, hi - lo);
  });
}

void CpuBackend::vocab_rows(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) {
  const int64_t n = out.dim(0), h = x.dim(1), r = t.rows_per_slot, w = t.width, v = t.base_vocab;
  check(out.dtype == DType::kF32 && out.dim(1) == w && base.dim(0) == n && base.dim(1) == v && x.dim(0) == n &&
            row_slot.numel() == n, "vocab_rows: shape mismatch");
  const int32_t* slot = row_slot.ptr<int32_t>();
  parallel(n, w, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t size = slot[i] < 0 || r == 0 ? v : t.vocab_sizes.ptr<int32_t>()[slot[i]];
      float* o = out.ptr<float>() + i * w;
      std::memcpy(o, base.ptr<float>() + i * v, static_cast<size_t>(v) * sizeof(float));
      for (int64_t c = v; c < w; ++c) o[c] = c < size ? 0.f : -INFINITY;
    }
  });
  if (r == 0) return;
  // One matmul per slot in the step: its rows of x against the slot's lm_head rows (a full
  // modules_to_save lm_head is a whole vocabulary of them).
  std::vector<int32_t> done;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t s = slot[i];
    if (s < 0 || std::find(done.begin(), done.end(), s) != done.end()) continue;
    done.push_back(s);
    const int64_t count = t.row_counts.ptr<int32_t>()[s];
    if (count == 0) continue;
    std::vector<int64_t> mine;
    for (int64_t j = i; j < n; ++j)
      if (slot[j] == s) mine.push_back(j);
    const int64_t m = static_cast<int64_t>(mine.size());
    vocab_x_.resize(static_cast<size_t>(m * h));
    vocab_y_.resize(static_cast<size_t>(m * count));
    for (int64_t k = 0; k < m; ++k)
      std::memcpy(vocab_x_.data() + k * h, x.ptr<float>() + mine[k] * h, static_cast<size_t>(h) * sizeof(float));
    matmul(Tensor(vocab_y_.data(), DType::kF32, {m, count}), Tensor(vocab_x_.data(), DType::kF32, {m, h}),
           t.lm_head_rows.rows(s * r, count), Tensor());
    const int32_t* ids = t.lm_head_ids.ptr<int32_t>() + s * r;
    const int64_t size = t.vocab_sizes.ptr<int32_t>()[s];
    for (int64_t c = 0; c < count; ++c) check(ids[c] >= 0 && ids[c] < size, "vocab_rows: a slot's lm_head row is outside its vocabulary");
    for (int64_t k = 0; k < m; ++k) {
      float* o = out.ptr<float>() + mine[k] * w;
      for (int64_t c = 0; c < count; ++c) o[ids[c]] = vocab_y_[static_cast<size_t>(k * count + c)];
    }
  }
}

void CpuBackend::gather_rows(Tensor out, Tensor x, Tensor rows) {
  const int64_t m = out.dim(0), d = x.dim(1);
  check(out.dim(1) == d && rows.numel() == m, "gather_rows: shape mismatch");
  const int32_t* r = rows.ptr<int32_t>();
  for (int64_t i = 0; i < m; ++i) {
    check(r[i] >= 0 && r[i] < x.dim(0), "gather_rows: row out of range");
    std::memcpy(out.ptr<float>() + i * d, x.ptr<float>() + r[i] * d, static_cast<size_t>(d) * sizeof(float));
  }
}

}  // namespace quiver
