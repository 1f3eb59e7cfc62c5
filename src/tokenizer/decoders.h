// Decoders of tokenizer.json ("decoder"): ByteLevel, ByteFallback, Fuse, Strip, Replace,
// Metaspace and Sequence. Each maps the list of token strings to a new list; the decoded
// text is the concatenation of the final list.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

Result<std::unique_ptr<Decoder>> parse_decoder(const nlohmann::json& j, const std::string& path);

}  // namespace quiver
