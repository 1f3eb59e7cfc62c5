// The sampling defaults a model ships in generation_config.json, which vLLM applies to every
// request that leaves the field unset (`--generation-config auto`, its default). Only the
// fields vLLM takes from that file are read; max_new_tokens is vLLM's max_tokens, which
// bounds every request's (the server) or is the default (the Python LLM's sampling params).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace quiver {

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;

  bool empty() const { return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_new_tokens; }
  // "temperature=0.6, top_p=0.9" for the start-up report.
  std::string describe() const;
};

// From generation_config.json text; an error names the file's bad field.
Result<GenerationDefaults> parse_generation_defaults(const std::string& text, const std::string& what);

// `--generation-config`: "auto" reads MODEL_DIR/generation_config.json, "vllm" uses none (vLLM's
// own defaults), anything else is a folder holding a generation_config.json. A missing file
// under "auto" means no defaults; under a named folder it is an error. `override_json`
// (`--override-generation-config`, a JSON object; empty: none) sets fields over the file's.
Result<GenerationDefaults> load_generation_defaults(const std::string& setting, const std::string& model_dir,
                                                    const std::string& override_json = "");

}  // namespace quiver
