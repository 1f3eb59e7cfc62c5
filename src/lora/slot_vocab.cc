// SlotVocab: the slots' vocabulary rows and embed_tokens / lm_head LoRA. Loading never
// allocates: it zeroes the slot's regions and copies into them.
#include "lora/slot_vocab.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace quiver {

Status VocabLimits::check(const LoraAdapter& a, const ModelConfig& base, DType dtype) const {
  const AdapterVocab& v = a.vocab;
  if (v.empty()) return Status::ok();
  auto mib = [&](int64_t rows) {
    VocabLimits l{extra_vocab, rows};
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", static_cast<double>(l.slot_bytes(base, dtype)) / (1 << 20));
    return std::string(text);
  };
  if (v.new_tokens > extra_vocab)
    return Status::error("LoRA adapter '" + a.name + "' adds " + std::to_string(v.new_tokens) + " tokens (" + v.layout +
                         "), above --lora-extra-vocab-size " + std::to_string(extra_vocab) +
                         "; restart with --lora-extra-vocab-size " + std::to_string(v.new_tokens) + " or more");
  if (v.rows() > rows)
    return Status::error("LoRA adapter '" + a.name + "' sets " + std::to_string(v.rows()) +
                         " rows of embed_tokens / lm_head (" + v.layout + "), above --max-lora-vocab-rows " +
                         std::to_string(rows) + "; restart with --max-lora-vocab-rows " + std::to_string(v.rows()) +
                         " or more (" + mib(v.rows()) + " MiB per LoRA slot)");
  return Status::ok();
}

int64_t VocabLimits::slot_bytes(const ModelConfig& base, DType dtype) const {
  return rows * (2 * base.hidden_size * static_cast<int64_t>(dtype_size(vocab_rows_dtype(dtype, base))) + int64_t{4});
}

DType vocab_rows_dtype(DType slot_dtype, const ModelConfig& base) {
  return slot_dtype == DType::kBF16 && is_16bit_float(base.dtype) ? DType::kBF16 : DType::kF32;
}

std::string describe_adapter(const LoraAdapter& a, const VocabLimits& limits, const ModelConfig& base, DType dtype) {
  int modules = 0, rank = 0;
  for (const auto& layer : a.layers)
    for (const auto& m : layer)
      if (m) ++modules, rank = std::max(rank, m->rank);
  std::string s = "LoRA adapter '" + a.name + "': ";
  s += modules > 0 ? "rank " + std::to_string(rank) + " on " + std::to_string(modules) + " modules" : "no projection LoRA";
  if (a.embed_lora) s += ", embed_tokens LoRA rank " + std::to_string(a.embed_lora->rank);
  if (a.lm_head_lora) s += ", lm_head LoRA rank " + std::to_string(a.lm_head_lora->rank);
  const AdapterVocab& v = a.vocab;
  if (v.empty()) return s;
  const auto mib = [&](int64_t rows) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f",
                  static_cast<double>(VocabLimits{limits.extra_vocab, rows}.slot_bytes(base, dtype)) / (1 << 20));
    return std::string(text);
  };
  s += "; vocabulary (" + v.layout + "): " + std::to_string(v.new_tokens) + " new tokens, " +
       std::to_string(v.input_ids.size()) + " embed_tokens + " + std::to_string(v.output_ids.size()) +
       " lm_head rows, " + mib(v.rows()) + " of the " + mib(limits.rows) +
       " MiB a slot holds for rows (--max-lora-vocab-rows " + std::to_string(limits.rows) + ")";
  return s;
}

void upload_stack(Backend* backend, DType dtype, void* dst, const float* src, size_t n, std::vector<uint16_t>* narrow) {
  if (dtype == DType::kF32) {
    backend->copy_from_host(dst, src, n * sizeof(float));
  } else {
    narrow->resize(n);
    for (size_t i = 0; i < n; ++i) (*narrow)[i] = f32_to_bf16(src[i]);
    backend->copy_from_host(dst, narrow->data(), n * sizeof(uint16_t));
  }
  // A device backend may still be reading the staging asynchronously; wait before reuse.
  backend->synchronize();
}

SlotVocab::SlotVocab(Backend* backend, const ModelConfig& config, int max_loras, int max_rank, DType dtype,
                     VocabLimits limits)
    : backend_(backend),
      config_(config),
      max_loras_(max_loras),
      max_rank_(max_rank),
      dtype_(dtype),
      rows_dtype_(vocab_rows_dtype(dtype, config)),
      limits_(limits) {
  check(limits.extra_vocab >= 0 && limits.rows >= 0, "SlotVocab: negative vocabulary limits");
  input_ids_.resize(static_cast<size_t>(max_loras));
  const size_t slots = static_cast<size_t>(max_loras), es = dtype_size(dtype);
  const size_t row_es = dtype_size(rows_dtype_);
  const size_t h = static_cast<size_t>(config.hidden_size), r = static_cast<size_t>(max_rank);
  const size_t w = static_cast<size_t>(width());
  auto zeroed = [&](size_t bytes) {
    Buffer b(backend, bytes);
    backend->fill_zero(b.data(), b.bytes());  // empty slots must read as "nothing changed"
    return b;
  };
  if (limits.rows > 0) {
    const size_t rows = slots * static_cast<size_t>(limits.rows);
    embed_rows_ = zeroed(rows * h * row_es);
    lm_head_rows_ = zeroed(rows * h * row_es);
    lm_head_ids_ = zeroed(rows * sizeof(int32_t));
  }
  row_counts_ = zeroed(slots * sizeof(int32_t));
  vocab_sizes_ = Buffer(backend, slots * sizeof(int32_t));
  const std::vector<int32_t> base_sizes(slots, static_cast<int32_t>(config.vocab_size));
  backend->copy_from_host(vocab_sizes_.data(), base_sizes.data(), vocab_sizes_.bytes());
  embed_a_ = zeroed(slots * w * r * es);
  embed_b_ = zeroed(slots * h * r * es);
  head_a_ = zeroed(slots * r * h * es);
  head_b_ = zeroed(slots * w * r * es);
  ranks_ = zeroed(slots * 2 * sizeof(int32_t));
  backend->synchronize();
}

size_t SlotVocab::bytes() const {
  size_t n = 0;
  for (const Buffer* b : {&embed_rows_, &lm_head_rows_, &lm_head_ids_, &row_counts_, &vocab_sizes_, &embed_a_,
                          &embed_b_, &head_a_, &head_b_, &ranks_})
    n += b->bytes();
  return n;
}

VocabTables SlotVocab::tables() const {
  VocabTables t;
  t.base_vocab = config_.vocab_size;
  t.width = width();
  t.rows_per_slot = limits_.rows;
  t.row_counts = row_counts_.tensor(DType::kI32, {max_loras_});
  t.vocab_sizes = vocab_sizes_.tensor(DType::kI32, {max_loras_});
  if (limits_.rows > 0) {
    const int64_t rows = max_loras_ * limits_.rows;
    t.embed_rows = embed_rows_.tensor(rows_dtype_, {rows, config_.hidden_size});
    t.lm_head_rows = lm_head_rows_.tensor(rows_dtype_, {rows, config_.hidden_size});
    t.lm_head_ids = lm_head_ids_.tensor(DType::kI32, {rows});
  }
  const int64_t h = config_.hidden_size, r = max_rank_, w = width();
  t.lora.embed_a = embed_a_.tensor(dtype_, {max_loras_, w, r});
  t.lora.embed_b = embed_b_.tensor(dtype_, {max_loras_, h, r});
  t.lora.head_a = head_a_.tensor(dtype_, {max_loras_, r, h});
  t.lora.head_b = head_b_.tensor(dtype_, {max_loras_, w, r});
  t.lora.ranks = ranks_.tensor(DType::kI32, {max_loras_, 2});
  return t;
}

int32_t SlotVocab::embed_row(int slot, int32_t token) const {
  if (slot < 0) return token;
  const std::vector<int32_t>& ids = input_ids_[static_cast<size_t>(slot)];
  auto it = std::lower_bound(ids.begin(), ids.end(), token);
  if (it == ids.end() || *it != token) return token;
  return static_cast<int32_t>(config_.vocab_size + static_cast<int64_t>(slot) * limits_.rows + (it - ids.begin()));
}

void SlotVocab::load(int slot, const LoraAdapter& adapter) {
  check(slot >= 0 && slot < max_loras_, "SlotVocab::load: slot out of range");
  load_rows(slot, adapter.vocab);
  load_lora(slot, adapter);
  backend_->synchronize();
}

void SlotVocab::load_rows(int slot, const AdapterVocab& v) {
  input_ids_[static_cast<size_t>(slot)] = v.input_ids;
  const int32_t size = static_cast<int32_t>(config_.vocab_size + v.new_tokens);
  backend_->copy_from_host(static_cast<int32_t*>(vocab_sizes_.data()) + slot, &size, sizeof(int32_t));
  if (limits_.rows == 0) return;
  const size_t row_bytes = static_cast<size_t>(config_.hidden_size) * dtype_size(rows_dtype_);
  const size_t first = static_cast<size_t>(slot) * static_cast<size_t>(limits_.rows);
  auto upload_rows = [&](const Buffer& buf, const std::vector<float>& rows) {
    char* dst = static_cast<char*>(buf.data()) + first * row_bytes;
    backend_->fill_zero(dst, static_cast<size_t>(limits_.rows) * row_bytes);
    if (!rows.empty()) upload_stack(backend_, rows_dtype_, dst, rows.data(), rows.size(), &narrow_);
  };
  upload_rows(embed_rows_, v.input_rows);
  upload_rows(lm_head_rows_, v.output_rows);
  std::vector<int32_t> ids(static_cast<size_t>(limits_.rows), 0);
  std::copy(v.output_ids.begin(), v.output_ids.end(), ids.begin());
  backend_->copy_from_host(static_cast<int32_t*>(lm_head_ids_.data()) + first, ids.data(), ids.size() * sizeof(int32_t));
  const int32_t count = static_cast<int32_t>(v.output_ids.size());
  backend_->copy_from_host(static_cast<int32_t*>(row_counts_.data()) + slot, &count, sizeof(int32_t));
}

void SlotVocab::load_lora(int slot, const LoraAdapter& a) {
  const size_t es = dtype_size(dtype_), s = static_cast<size_t>(slot);
  const size_t h = static_cast<size_t>(config_.hidden_size), R = static_cast<size_t>(max_rank_);
  const size_t w = static_cast<size_t>(width());
  // [rows, r] -> the slot's [rows_cap, R]: each row padded on the host, one copy.
  auto rows_padded = [&](const Buffer& buf, size_t rows_cap, const LoraModule* m, const std::vector<float>* src) {
    char* dst = static_cast<char*>(buf.data()) + s * rows_cap * R * es;
    backend_->fill_zero(dst, rows_cap * R * es);
    if (m == nullptr) return;
    const size_t r = static_cast<size_t>(m->rank), rows = src->size() / r;
    check(rows <= rows_cap && rows * r == src->size(), "SlotVocab: LoRA matrix larger than its stack");
    padded_.assign(rows * R, 0.f);
    for (size_t i = 0; i < rows; ++i)
      for (size_t k = 0; k < r; ++k) padded_[i * R + k] = (*src)[i * r + k];
    upload_stack(backend_, dtype_, dst, padded_.data(), padded_.size(), &narrow_);
  };
  const LoraModule* e = a.embed_lora ? &*a.embed_lora : nullptr;
  const LoraModule* l = a.lm_head_lora ? &*a.lm_head_lora : nullptr;
  check(!e || e->rank <= max_rank_, "SlotVocab: embed_tokens LoRA rank above the stacks'");
  check(!l || l->rank <= max_rank_, "SlotVocab: lm_head LoRA rank above the stacks'");
  rows_padded(embed_a_, w, e, e ? &e->a : nullptr);
  rows_padded(embed_b_, h, e, e ? &e->b : nullptr);
  rows_padded(head_b_, w, l, l ? &l->b : nullptr);
  // lm_head's A [r, hidden] is the first r rows of the slot's [R, hidden].
  char* head_a = static_cast<char*>(head_a_.data()) + s * R * h * es;
  backend_->fill_zero(head_a, R * h * es);
  if (l) {
    check(l->a.size() == static_cast<size_t>(l->rank) * h, "SlotVocab: lm_head LoRA A of another shape");
    upload_stack(backend_, dtype_, head_a, l->a.data(), l->a.size(), &narrow_);
  }
  const int32_t ranks[2] = {e ? e->rank : 0, l ? l->rank : 0};
  backend_->copy_from_host(static_cast<int32_t*>(ranks_.data()) + 2 * s, ranks, sizeof ranks);
}

}  // namespace quiver
