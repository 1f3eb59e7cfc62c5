// LLM: the offline convenience API (vLLM's LLM.generate): submit everything, step until
// done, return one RequestOutput per prompt in input order.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/llm_engine.h"

namespace quiver {

class LLM {
 public:
  static Result<LLM> create(const EngineArgs& args);

  // loras: empty, or one entry per prompt (nullopt = base model). A request that cannot
  // be added comes back finished with `error` set; the others still run.
  std::vector<RequestOutput> generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                      const std::vector<std::optional<LoRARequest>>& loras = {});
  LLMEngine& engine() { return *engine_; }

 private:
  explicit LLM(std::unique_ptr<LLMEngine> engine) : engine_(std::move(engine)) {}
  std::unique_ptr<LLMEngine> engine_;
  int64_t next_id_ = 0;
};

}  // namespace quiver
