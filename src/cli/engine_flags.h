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
  // vLLM flags whose meaning quiver always has: accepted so that a vLLM command line runs.
  bool trust_remote_code = false;  // quiver runs no code from a model folder
  bool chunked_prefill = true;     // --no-enable-chunked-prefill is refused (finalize)
};

// Adapters are taken as --lora (vLLM's offline spelling) or --lora-modules (vllm serve's) by
// every subcommand, so a command line moves between them unchanged. positional_model: the
// model folder may also come first without --model, as in `vllm serve MODEL`.
void add_engine_flags(CLI::App* cmd, EngineFlags* flags, bool positional_model = false);
// Turns the adapter specs into args.lora_modules (an error names a malformed one) and
// enables LoRA when any is given; refuses a vLLM flag asking for what quiver does not do.
Status finalize_engine_flags(EngineFlags* flags);

}  // namespace quiver
