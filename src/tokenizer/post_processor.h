// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing (BOS/EOS
// insertion), ByteLevel (only adjusts offsets, so a no-op here), Bert/Roberta, Sequence.
// Only single sequences are supported (no pairs).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

class PostProcessor {
 public:
  // One item of the template for a single sequence: special-token ids, or the sequence.
  struct Item {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };

  // Returns null for a JSON null (no post-processor).
  static Result<std::unique_ptr<PostProcessor>> parse(const nlohmann::json& j, const std::string& path);
  // A template "[bos] $A [eos]" (either optional) as transformers builds it from
  // tokenizer_config.json's add_bos_token / add_eos_token.
  static std::unique_ptr<PostProcessor> bos_eos(std::optional<int32_t> bos, std::optional<int32_t> eos);

  void process(std::vector<int32_t>& ids, bool add_special_tokens) const;
  bool is_template() const { return is_template_; }

 private:
  std::vector<Item> single_;  // empty: leave the sequence as it is
  bool is_template_ = false;  // made from TemplateProcessing (or bos_eos)
};

}  // namespace quiver
