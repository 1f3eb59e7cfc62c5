#include "backend/ref/ref_backend.h"

#include <cmath>
#include <vector>

namespace quiver {

namespace {

// Stores a float into element i of a cache of dtype t.
void store_from_f32(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); break;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); break;
    case DType::kF8E4M3: static_cast<uint8_t*>(data)[i] = f32_to_e4m3(v); break;
    case DType::kI32:
    case DType::kI8: check(false, "a kv cache holds floats");
  }
}

void check_f32(const Tensor& t, const char* what) {
  check(t.dtype == DType::kF32, what);
}

}  // namespace

void RefBackend::embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) {
  check_f32(out, "embedding: out must be f32");
  const int64_t n = out.dim(0), d = out.dim(1), vocab = table.dim(0);
  const int64_t rows = extra.empty() ? 0 : extra.dim(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids.ptr<int32_t>()[i];
    check(id >= 0 && id < vocab + rows, "embedding: id out of range");
    const Tensor& t = id < vocab ? table : extra;
    const int64_t row = id < vocab ? id : id - vocab;
    for (int64_t j = 0; j < d; ++j) out.ptr<float>()[i * d + j] = load_as_f32(t.data, t.dtype, row * d + j);
  }
}

void RefBackend::rms_norm_f32(Tensor out, Tensor x, Tensor w, float eps) {
  const int64_t n = x.dim(0), d = x.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x.ptr<float>() + i * d;
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    // HF: x * rsqrt(mean(x^2) + eps) in float32, then weight * x
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
    for (int64_t j = 0; j < d; ++j) out.ptr<float>()[i * d + j] = load_as_f32(w.data, w.dtype, j) * (xr[j] * inv);
  }
}

void RefBackend::add_rms_norm_f32(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) {
  for (int64_t i = 0; i < residual.numel(); ++i) residual.ptr<float>()[i] += x.ptr<float>()[i];
  rms_norm_f32(out, residual, w, eps);
}

void RefBackend::matmul(Tensor y, Tensor x, Tensor w, Tensor bias) {
  check_f32(y, "matmul: y must be f32");
  check_f32(x, "matmul: x must be f32");
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  check(w.dim(1) == in && y.dim(0) == n && y.dim(1) == out, "matmul: shape mismatch");
  check(w.dtype != DType::kI8 || w.row_scale != nullptr, "matmul: an int8 weight needs its row scales");
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      // A weight with row scales (int8; FP8 values in bf16) multiplies as its dequantized
      // float32 values q * scale would.
      const float scale = w.row_scale ? w.row_scale[o] : 1.f;
      double acc = 0;
      for (int64_t k = 0; k < in; ++k)
        acc += static_cast<double>(x.ptr<float>()[i * in + k]) * (load_as_f32(w.data, w.dtype, o * in + k) * scale);
      if (!bias.empty()) acc += load_as_f32(bias.data, bias.dtype, o);
      y.ptr<float>()[i * out + o] = static_cast<float>(acc);
    }
  }
}

void RefBackend::matmul_x16(Tensor y, Tensor x16, Tensor w, Tensor bias) {
  check(x16.dtype == DType::kBF16 && x16.ndim == 2 && (w.dtype == DType::kBF16 || w.dtype == DType::kI8),
        "matmul_x16: x16 must be bf16, w bf16 or int8");
  std::vector<float> x(static_cast<size_t>(x16.numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(x16.ptr<uint16_t>()[i]);
  matmul(y, Tensor(x.data(), DType::kF32, {x16.dim(0), x16.dim(1)}), w, bias);
}

void RefBackend::round_to_16bit(Tensor out16, Tensor x) {
  check_f32(x, "round_to_16bit: x must be f32");
  check(is_16bit_float(out16.dtype) && out16.numel() == x.numel(), "round_to_16bit: out16 must be 16-bit, x's size");
  auto* o = out16.ptr<uint16_t>();
  for (int64_t i = 0; i < x.numel(); ++i)
    o[i] = out16.dtype == DType::kBF16 ? f32_to_bf16(x.ptr<float>()[i]) : f32_to_f16(x.ptr<float>()[i]);
}

void RefBackend::rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) {
  const int64_t n = q.dim(0), hd = q.dim(2), half = hd / 2;
  auto rotate = [&](float* v, int64_t pos) {
    const float* cs = cos_sin.ptr<float>() + pos * hd;
    for (int64_t j = 0; j < half; ++j) {
      float c = cs[j], s = cs[half + j];
      float a = v[j], b = v[j + half];
      v[j] = a * c - b * s;
      v[j + half] = b * c + a * s;
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    int64_t pos = positions.ptr<int32_t>()[i];
    check(pos >= 0 && pos < cos_sin.dim(0), "rope: position beyond the table");
    for (int64_t h = 0; h < q.dim(1); ++h) rotate(q.ptr<float>() + (i * q.dim(1) + h) * hd, pos);
    for (int64_t h = 0; h < k.dim(1); ++h) rotate(k.ptr<float>() + (i * k.dim(1) + h) * hd, pos);
  }
}

void RefBackend::kv_write(const KvLayer& cache, Tensor k, Tensor v, Tensor slot_mapping) {
  const Tensor k_cache = cache.k, v_cache = cache.v;
  const int64_t n = k.dim(0), row = k.dim(1) * k.dim(2);
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  const bool fp8 = k_cache.dtype == DType::kF8E4M3;
  const float ks = fp8 ? cache.k_scale : 1.f, vs = fp8 ? cache.v_scale : 1.f;
  for (int64_t i = 0; i < n; ++i) {
    int64_t slot = slot_mapping.ptr<int32_t>()[i];
    if (slot < 0) continue;
    check(slot < num_slots, "kv_write: slot out of range");
    for (int64_t j = 0; j < row; ++j) {
      store_from_f32(k_cache.data, k_cache.dtype, slot * row + j, k.ptr<float>()[i * row + j] / ks);
      store_from_f32(v_cache.data, v_cache.dtype, slot * row + j, v.ptr<float>()[i * row + j] / vs);
    }
  }
}

void RefBackend::attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) {
  const Tensor k_cache = cache.k, v_cache = cache.v;
  const bool fp8 = k_cache.dtype == DType::kF8E4M3;
  const double ks = fp8 ? cache.k_scale : 1.0, vs = fp8 ? cache.v_scale : 1.0;
  const int64_t num_heads = q.dim(1), hd = q.dim(2);
  const int64_t block_size = k_cache.dim(1), num_kv = k_cache.dim(2);
  const int64_t group = num_heads / num_kv;
  const int64_t max_blocks = meta.block_tables.ndim == 2 ? meta.block_tables.dim(1) : 0;
  const int32_t* qs = meta.query_start.ptr<int32_t>();
  const int32_t* lens = meta.seq_lens.ptr<int32_t>();
  const int32_t* tables = meta.block_tables.ptr<int32_t>();
  std::vector<double> scores;
  for (int s = 0; s < meta.num_seqs; ++s) {
    const int64_t q_len = qs[s + 1] - qs[s], len = lens[s];
    for (int64_t j = 0; j < q_len; ++j) {
      const int64_t row = qs[s] + j, pos = len - q_len + j;
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qv = q.ptr<float>() + (row * num_heads + h) * hd;
        scores.assign(pos + 1, 0.0);
        double mx = -INFINITY;
        for (int64_t t = 0; t <= pos; ++t) {
          int64_t slot = tables[s * max_blocks + t / block_size] * block_size + t % block_size;
          size_t base = static_cast<size_t>((slot * num_kv + kvh) * hd);
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += static_cast<double>(qv[e]) * load_as_f32(k_cache.data, k_cache.dtype, base + e);
          scores[t] = dot * ks * scale;
          mx = std::max(mx, scores[t]);
        }
        double sum = 0;
        for (auto& sc : scores) sum += (sc = std::exp(sc - mx));
        float* o = out.ptr<float>() + (row * num_heads + h) * hd;
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t t = 0; t <= pos; ++t) {
            int64_t slot = tables[s * max_blocks + t / block_size] * block_size + t % block_size;
            acc += scores[t] * load_as_f32(v_cache.data, v_cache.dtype, static_cast<size_t>((slot * num_kv + kvh) * hd + e));
          }
          o[e] = static_cast<float>(acc * vs / sum);
        }
      }
    }
  }
}

void RefBackend::silu_mul_f32(Tensor out, Tensor gate, Tensor up) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    float g = gate.ptr<float>()[i];
    out.ptr<float>()[i] = g / (1.0f + std::exp(-g)) * up.ptr<float>()[i];
  }
}

void RefBackend::vocab_rows(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) {
  check_f32(out, "vocab_rows: out must be f32");
  const int64_t n = out.dim(0), h = x.dim(1), r = t.rows_per_slot;
  check(out.dim(1) == t.width && base.dim(0) == n && base.dim(1) == t.base_vocab && x.dim(0) == n &&
            row_slot.numel() == n, "vocab_rows: shape mismatch");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t s = row_slot.ptr<int32_t>()[i];
    const int64_t size = s < 0 || r == 0 ? t.base_vocab : t.vocab_sizes.ptr<int32_t>()[s];
    float* o = out.ptr<float>() + i * t.width;
    for (int64_t c = 0; c < t.width; ++c)
      o[c] = c >= size ? -INFINITY : c < t.base_vocab ? base.ptr<float>()[i * t.base_vocab + c] : 0.f;
    if (s < 0 || r == 0) continue;
    for (int64_t j = 0; j < t.row_counts.ptr<int32_t>()[s]; ++j) {
      const int64_t row = s * r + j;
      double acc = 0;
      for (int64_t k = 0; k < h; ++k)
        acc += static_cast<double>(x.ptr<float>()[i * h + k]) * load_as_f32(t.lm_head_rows.data, t.lm_head_rows.dtype, row * h + k);
      const int32_t id = t.lm_head_ids.ptr<int32_t>()[row];
      check(id >= 0 && id < size, "vocab_rows: a slot's lm_head row is outside its vocabulary");
      o[id] = static_cast<float>(acc);
    }
  }
}

void RefBackend::gather_rows(Tensor out, Tensor x, Tensor rows) {
  const int64_t d = x.dim(1);
  for (int64_t i = 0; i < out.dim(0); ++i) {
    int64_t r = rows.ptr<int32_t>()[i];
    check(r >= 0 && r < x.dim(0), "gather_rows: row out of range");
    for (int64_t j = 0; j < d; ++j) out.ptr<float>()[i * d + j] = x.ptr<float>()[r * d + j];
  }
}

void RefBackend::lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) {
  const int64_t n = x.dim(0), in = x.dim(1), rank = a_stack.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t slot = meta.token_slot.ptr<int32_t>()[i];
    if (slot < 0) continue;
    check(slot < a_stack.dim(0), "lora_shrink: slot out of range");
    for (int64_t r = 0; r < rank; ++r) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k)
        acc += static_cast<double>(x.ptr<float>()[i * in + k]) * load_as_f32(a_stack.data, a_stack.dtype, (slot * rank + r) * in + k);
      t.ptr<float>()[i * rank + r] = static_cast<float>(acc);
    }
  }
}

void RefBackend::lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) {
  const int64_t n = y.dim(0), out = y.dim(1), rank = b_stack.dim(2);
  for (int64_t i = 0; i < n; ++i) {
    int64_t slot = meta.token_slot.ptr<int32_t>()[i];
    if (slot < 0) continue;
    check(slot < b_stack.dim(0), "lora_expand: slot out of range");
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t r = 0; r < rank; ++r)
        acc += static_cast<double>(t.ptr<float>()[i * rank + r]) * load_as_f32(b_stack.data, b_stack.dtype, (slot * out + o) * rank + r);
      y.ptr<float>()[i * out + o] += static_cast<float>(acc);
    }
  }
}

}  // namespace quiver
