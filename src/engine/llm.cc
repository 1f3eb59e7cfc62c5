#include "engine/llm.h"

#include <map>

namespace quiver {

Result<LLM> LLM::create(const EngineArgs& args) {
  auto engine = LLMEngine::create(args);
  if (!engine.is_ok()) return engine.status();
  return LLM(std::move(engine).value());
}

std::vector<RequestOutput> LLM::generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                         const std::vector<std::optional<LoRARequest>>& loras) {
  std::vector<RequestOutput> results(prompts.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "llm-" + std::to_string(next_id_++);
    results[i].request_id = id;
    const std::optional<LoRARequest> lora = i < loras.size() ? loras[i] : std::nullopt;
    Status s = engine_->add_request(id, prompts[i], params, lora);
    if (s.is_ok()) {
      index[id] = i;
    } else {
      results[i].finished = true;
      results[i].error = s.message();
    }
  }
  while (engine_->has_unfinished_requests())
    for (RequestOutput& out : engine_->step())
      if (out.finished) results[index.at(out.request_id)] = std::move(out);
  return results;
}

}  // namespace quiver
