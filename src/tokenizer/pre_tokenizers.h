// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel, Split, Metaspace, Digits
// and Sequence. They cut normalized text into the words the BPE model sees.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

// One piece of input text on its way to the model.
struct PreToken {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the original input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const nlohmann::json& j, const std::string& path);

// How a Split keeps the pieces its pattern matches (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start, end;
};
// Turns the matches of a pattern in a text of `length` bytes into the pieces to keep.
std::vector<Span> split_spans(size_t length, const std::vector<Span>& matches, SplitBehavior behavior,
                              bool invert);

}  // namespace quiver
