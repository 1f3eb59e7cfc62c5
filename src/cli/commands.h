// Subcommands of `quiver`. Each registers itself on the app; its callback stores the
// process exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace quiver {

void register_generate(CLI::App& app, int* exit_code);
void register_tokenize(CLI::App& app, int* exit_code);
void register_bench(CLI::App& app, int* exit_code);
void register_serve(CLI::App& app, int* exit_code);
void register_verify(CLI::App& app, int* exit_code);

}  // namespace quiver
