// The `lmhead` command-line tool. Errors go to stderr with a non-zero exit status.
#include <cstdio>
#include <exception>

#include "common.hpp"
#include "lmhead/files.hpp"

int main(int argc, char** argv) {
  lmhead::remove_temporaries_on_signals();
  CLI::App app{"lmhead: the last stage of an LLM decoder step (RMSNorm, quantized LM head, logit scale, soft cap, token choice)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lmhead 0.1.0");
  std::vector<std::pair<CLI::App*, lmhead::cli::Action>> commands;
  auto add = [&](auto reg) {
    const size_t before = app.get_subcommands({}).size();
    lmhead::cli::Action action = reg(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(action));
  };
  add(lmhead::cli::register_demo);
  add(lmhead::cli::register_info);
  add(lmhead::cli::register_run);
  add(lmhead::cli::register_make);
  add(lmhead::cli::register_bench);
  add(lmhead::cli::register_verify);
  add(lmhead::cli::register_compare);
  add(lmhead::cli::register_quantize);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [cmd, action] : commands)
      if (cmd->parsed()) return action();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lmhead: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
