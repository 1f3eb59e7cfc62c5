// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked
// merges, byte fallback, unk handling, ignore_merges and a word -> ids cache.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

// Hash for string keys that also accepts string_view lookups without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `j` is the "model" object; `path` names it in errors.
  static Result<std::unique_ptr<BpeModel>> parse(const nlohmann::json& j, const std::string& path);

  // Appends the ids of one pre-tokenized word (already normalized and byte-mapped).
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // null if the id has no token
  int64_t max_id() const { return static_cast<int64_t>(id_to_token_.size()) - 1; }

 private:
  struct MergeTarget {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;     // "" for ids that are not in the vocabulary
  std::vector<uint8_t> has_token_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t byte_ids_[256];  // id of "<0xXX>" per byte when byte_fallback, else -1

  // Repeated words are common (spaces, punctuation, frequent words): remember their ids.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace quiver
