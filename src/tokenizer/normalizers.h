// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// Prepend, Replace and Sequence. They rewrite text before pre-tokenization; quiver does not
// track offsets, so each is a plain string -> string function.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual void normalize(std::string& text) const = 0;
};

// Parses one normalizer object; `path` names it in errors (e.g. "normalizer.normalizers[0]").
Result<std::unique_ptr<Normalizer>> parse_normalizer(const nlohmann::json& j, const std::string& path);

}  // namespace quiver
