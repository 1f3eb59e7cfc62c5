// The engine flags every serving subcommand shares (generate, serve, bench, verify),
// spelled as vLLM spells them.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "engine/engine_args.h"

namespace quiver {

struct EngineFlags {
  EngineArgs args;
  std::vector<std::string> loras;  // NAME=DIR or vLLM's {"name": ..., "path": ..., "base_model_name": ...}
};

void add_engine_flags(CLI::App* cmd, EngineFlags* flags, const std::string& lora_flag = "--lora");
// Turns the adapter specs into args.lora_modules (an error names a malformed one) and
// enables LoRA when any is given.
Status finalize_engine_flags(EngineFlags* flags);

}  // namespace quiver
