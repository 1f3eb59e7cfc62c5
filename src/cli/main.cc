// quiver: the command line. Each subcommand lives in its own file (see commands.h).
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"quiver: multi-LoRA LLM inference"};
  app.require_subcommand(1);
  // Every option's --help line shows its default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  int exit_code = 0;
  quiver::register_generate(app, &exit_code);
  quiver::register_tokenize(app, &exit_code);
  quiver::register_bench(app, &exit_code);
  quiver::register_verify(app, &exit_code);
#if defined(QUIVER_HAS_SERVER)
  quiver::register_serve(app, &exit_code);
#endif
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
