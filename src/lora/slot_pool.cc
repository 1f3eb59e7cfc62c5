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

LoraSlotPool::LoraSlotPool(Backend* backend, const ModelConfig& config, int max_loras, int max_rank, DType dtype,
                           VocabLimits vocab)
    : backend_(backend),
      config_(config),
      max_loras_(max_loras),
      max_rank_(max_rank),
      dtype_(dtype),
      vocab_(backend, config, max_loras, max_rank, dtype, vocab) {
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
    QV_RETURN_IF_ERROR(vocab_.limits().check(adapter, config_, dtype_));
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
      upload_stack(backend_, dtype_, a_slot, m->a.data(), m->a.size(), &narrow);
      // B [out, r] goes to [out, max_rank]: pad each row on the host, copy once.
      padded.assign(out * rank, 0.f);
      for (size_t o = 0; o < out; ++o)
        for (size_t k = 0; k < r; ++k) padded[o * rank + k] = m->b[o * r + k];
      upload_stack(backend_, dtype_, b_slot, padded.data(), padded.size(), &narrow);
    }
  }
  vocab_.load(slot, adapter);
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
