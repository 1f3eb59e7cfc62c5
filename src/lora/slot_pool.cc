// LoraSlotPool: fixed device stacks per (layer, target), slots handed out with pin counts
// and LRU eviction. Loading never allocates: it zeroes the slot and copies into it, so
// addresses captured by CUDA graphs stay valid forever.
#include "lora/slot_pool.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace quiver {

namespace {

constexpr int kNumStacksPerModule = 2;  // a, b

size_t buffer_index(int layer, LoraTarget target, bool is_b) {
  return (static_cast<size_t>(layer) * kNumLoraTargets + static_cast<size_t>(target)) * kNumStacksPerModule +
         (is_b ? 1 : 0);
}

}  // namespace

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
  return rows * (2 * base.hidden_size * static_cast<int64_t>(dtype_size(dtype)) + int64_t{4});
}

LoraSlotPool::LoraSlotPool(Backend* backend, const ModelConfig& config, int max_loras, int max_rank, DType dtype,
                           VocabLimits vocab)
    : backend_(backend), config_(config), max_loras_(max_loras), max_rank_(max_rank), dtype_(dtype), vocab_(vocab) {
  check(backend != nullptr, "LoraSlotPool: null backend");
  check(dtype == DType::kF32 || dtype == DType::kBF16, "LoraSlotPool: stacks must be f32 or bf16");
  check(max_loras >= 1, "LoraSlotPool: max_loras must be at least 1");
  check(max_rank >= 1, "LoraSlotPool: max_rank must be at least 1");
  slots_.resize(static_cast<size_t>(max_loras));
  buffers_.reserve(static_cast<size_t>(config.num_layers) * kNumLoraTargets * kNumStacksPerModule);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto target = static_cast<LoraTarget>(t);
      const size_t in = static_cast<size_t>(lora_target_in(config, target));
      const size_t out = static_cast<size_t>(lora_target_out(config, target));
      const size_t per_slot = static_cast<size_t>(max_rank) * dtype_size(dtype);
      for (size_t elems_per_rank : {in, out}) {
        Buffer buf(backend, static_cast<size_t>(max_loras) * per_slot * elems_per_rank);
        backend->fill_zero(buf.data(), buf.bytes());  // empty slots must read as "no LoRA"
        buffers_.push_back(std::move(buf));
      }
    }
  }
  check(vocab.extra_vocab >= 0 && vocab.rows >= 0, "LoraSlotPool: negative vocabulary limits");
  if (vocab.rows > 0) {
    const size_t rows = static_cast<size_t>(max_loras) * static_cast<size_t>(vocab.rows);
    const size_t row_bytes = static_cast<size_t>(config.hidden_size) * dtype_size(dtype);
    embed_rows_ = Buffer(backend, rows * row_bytes);
    lm_head_rows_ = Buffer(backend, rows * row_bytes);
    lm_head_ids_ = Buffer(backend, rows * sizeof(int32_t));
    row_counts_ = Buffer(backend, static_cast<size_t>(max_loras) * sizeof(int32_t));
    vocab_sizes_ = Buffer(backend, static_cast<size_t>(max_loras) * sizeof(int32_t));
    for (Buffer* b : {&embed_rows_, &lm_head_rows_, &lm_head_ids_, &row_counts_}) backend->fill_zero(b->data(), b->bytes());
    const std::vector<int32_t> base_sizes(static_cast<size_t>(max_loras), static_cast<int32_t>(config.vocab_size));
    backend->copy_from_host(vocab_sizes_.data(), base_sizes.data(), vocab_sizes_.bytes());
    backend->synchronize();
  }
}

VocabTables LoraSlotPool::vocab_tables() const {
  VocabTables t;
  t.base_vocab = config_.vocab_size;
  t.width = vocab_width();
  t.rows_per_slot = vocab_.rows;
  if (vocab_.rows == 0) return t;
  const int64_t rows = max_loras_ * vocab_.rows;
  t.embed_rows = embed_rows_.tensor(dtype_, {rows, config_.hidden_size});
  t.lm_head_rows = lm_head_rows_.tensor(dtype_, {rows, config_.hidden_size});
  t.lm_head_ids = lm_head_ids_.tensor(DType::kI32, {rows});
  t.row_counts = row_counts_.tensor(DType::kI32, {max_loras_});
  t.vocab_sizes = vocab_sizes_.tensor(DType::kI32, {max_loras_});
  return t;
}

int32_t LoraSlotPool::embed_row(int slot, int32_t token) const {
  if (slot < 0) return token;
  const std::vector<int32_t>& ids = slots_[static_cast<size_t>(slot)].input_ids;
  auto it = std::lower_bound(ids.begin(), ids.end(), token);
  if (it == ids.end() || *it != token) return token;
  return static_cast<int32_t>(config_.vocab_size + static_cast<int64_t>(slot) * vocab_.rows + (it - ids.begin()));
}

void LoraSlotPool::load_vocab(int slot, const AdapterVocab& v) {
  slots_[static_cast<size_t>(slot)].input_ids = v.input_ids;
  if (vocab_.rows == 0) return;
  const int64_t h = config_.hidden_size;
  const size_t es = dtype_size(dtype_);
  const size_t row_bytes = static_cast<size_t>(h) * es;
  const size_t first = static_cast<size_t>(slot) * static_cast<size_t>(vocab_.rows);
  std::vector<uint16_t> narrow;
  auto upload_rows = [&](const Buffer& buf, const std::vector<float>& rows) {
    char* dst = static_cast<char*>(buf.data()) + first * row_bytes;
    backend_->fill_zero(dst, static_cast<size_t>(vocab_.rows) * row_bytes);
    if (!rows.empty()) upload(dst, rows.data(), rows.size(), &narrow);
  };
  upload_rows(embed_rows_, v.input_rows);
  upload_rows(lm_head_rows_, v.output_rows);
  std::vector<int32_t> ids(static_cast<size_t>(vocab_.rows), 0);
  std::copy(v.output_ids.begin(), v.output_ids.end(), ids.begin());
  backend_->copy_from_host(static_cast<int32_t*>(lm_head_ids_.data()) + first, ids.data(), ids.size() * sizeof(int32_t));
  const int32_t count = static_cast<int32_t>(v.output_ids.size());
  const int32_t size = static_cast<int32_t>(config_.vocab_size + v.new_tokens);
  backend_->copy_from_host(static_cast<int32_t*>(row_counts_.data()) + slot, &count, sizeof(int32_t));
  backend_->copy_from_host(static_cast<int32_t*>(vocab_sizes_.data()) + slot, &size, sizeof(int32_t));
  backend_->synchronize();
}

Tensor LoraSlotPool::a_stack(int layer, LoraTarget target) const {
  check(layer >= 0 && layer < config_.num_layers, "a_stack: layer out of range");
  return buffers_[buffer_index(layer, target, false)].tensor(dtype_,
                                                             {max_loras_, max_rank_, lora_target_in(config_, target)});
}

Tensor LoraSlotPool::b_stack(int layer, LoraTarget target) const {
  check(layer >= 0 && layer < config_.num_layers, "b_stack: layer out of range");
  return buffers_[buffer_index(layer, target, true)].tensor(dtype_,
                                                            {max_loras_, lora_target_out(config_, target), max_rank_});
}

Result<int> LoraSlotPool::acquire(uint64_t uid, const LoraAdapter& adapter) {
  check(uid != 0, "acquire: uid 0 means 'empty slot'");
  int slot = slot_of(uid);
  if (slot < 0) {
    if (adapter.max_rank > max_rank_)
      return Status::error("LoRA adapter '" + adapter.name + "' has rank " + std::to_string(adapter.max_rank) +
                           ", above --max-lora-rank " + std::to_string(max_rank_));
    check(static_cast<int64_t>(adapter.layers.size()) == config_.num_layers,
          "acquire: adapter was loaded for a model with another layer count");
    QV_RETURN_IF_ERROR(vocab_.check(adapter, config_, dtype_));
    // A free slot first; otherwise the least recently used unpinned one.
    for (int s = 0; s < max_loras_ && slot < 0; ++s)
      if (slots_[s].uid == 0) slot = s;
    if (slot < 0)
      for (int s = 0; s < max_loras_; ++s)
        if (slots_[s].pins == 0 && (slot < 0 || slots_[s].last_used < slots_[slot].last_used)) slot = s;
    if (slot < 0)
      return Status::error("all " + std::to_string(max_loras_) +
                           " LoRA slots are pinned by running requests (raise --max-loras)");
    load_into(slot, adapter);
    slots_[slot].uid = uid;
    slots_[slot].pins = 0;
    ++loads_;
  }
  slots_[slot].pins += 1;
  slots_[slot].last_used = ++clock_;
  return slot;
}

void LoraSlotPool::load_into(int slot, const LoraAdapter& adapter) {
  // Zero the whole slot first: a module this adapter does not target must not keep the
  // previous occupant's weights (they would silently be applied to these requests).
  const size_t s = static_cast<size_t>(slot);
  const size_t es = dtype_size(dtype_);
  std::vector<float> padded;      // host staging for one B, reused across modules
  std::vector<uint16_t> narrow;   // bf16 staging, reused across modules
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto target = static_cast<LoraTarget>(t);
      const size_t in = static_cast<size_t>(lora_target_in(config_, target));
      const size_t out = static_cast<size_t>(lora_target_out(config_, target));
      const size_t rank = static_cast<size_t>(max_rank_);
      char* a_slot = static_cast<char*>(buffers_[buffer_index(static_cast<int>(l), target, false)].data()) +
                     s * rank * in * es;  // [max_rank, in]
      char* b_slot = static_cast<char*>(buffers_[buffer_index(static_cast<int>(l), target, true)].data()) +
                     s * out * rank * es;  // [out, max_rank]
      backend_->fill_zero(a_slot, rank * in * es);
      backend_->fill_zero(b_slot, out * rank * es);

      const auto& m = adapter.layers[l][t];
      if (!m) continue;
      const size_t r = static_cast<size_t>(m->rank);
      check(r <= rank && m->a.size() == r * in && m->b.size() == out * r, "load_into: module shape mismatch");
      // A [r, in] is the first r rows of the slot's [max_rank, in]: one contiguous copy.
      upload(a_slot, m->a.data(), m->a.size(), &narrow);
      // B [out, r] goes to [out, max_rank]: pad each row on the host, copy once.
      padded.assign(out * rank, 0.f);
      for (size_t o = 0; o < out; ++o)
        for (size_t k = 0; k < r; ++k) padded[o * rank + k] = m->b[o * r + k];
      upload(b_slot, padded.data(), padded.size(), &narrow);
    }
  }
  load_vocab(slot, adapter.vocab);
  backend_->synchronize();
}

void LoraSlotPool::upload(char* dst, const float* src, size_t n, std::vector<uint16_t>* narrow) {
  if (dtype_ == DType::kF32) {
    backend_->copy_from_host(dst, src, n * sizeof(float));
  } else {
    narrow->resize(n);
    for (size_t i = 0; i < n; ++i) (*narrow)[i] = f32_to_bf16(src[i]);
    backend_->copy_from_host(dst, narrow->data(), n * sizeof(uint16_t));
  }
  // A device backend may still be reading the staging asynchronously; wait before reuse.
  backend_->synchronize();
}

void LoraSlotPool::release(int slot) {
  check(slot >= 0 && slot < max_loras_, "release: slot out of range");
  check(slots_[slot].pins > 0, "release: slot is not pinned");
  slots_[slot].pins -= 1;
}

int LoraSlotPool::slot_of(uint64_t uid) const {
  if (uid == 0) return -1;
  for (int s = 0; s < max_loras_; ++s)
    if (slots_[s].uid == uid) return s;
  return -1;
}

bool LoraSlotPool::can_acquire(uint64_t uid) const {
  if (slot_of(uid) >= 0) return true;
  for (const auto& s : slots_)
    if (s.pins == 0) return true;
  return false;
}

int LoraSlotPool::num_pinned() const {
  int n = 0;
  for (const auto& s : slots_) n += s.pins > 0 ? 1 : 0;
  return n;
}

uint64_t LoraSlotPool::uid_in_slot(int slot) const {
  check(slot >= 0 && slot < max_loras_, "uid_in_slot: slot out of range");
  return slots_[slot].uid;
}

}  // namespace quiver
