#include <cstdio>

#include "common.hpp"

namespace lmhead::cli {

Action register_make(CLI::App& app) {
  auto* cmd = app.add_subcommand("make", "Write a synthetic checkpoint (the Muse Glimmer shape by default)");
  auto path = std::make_shared<std::string>();
  auto o = std::make_shared<MakeOptions>();
  cmd->add_option("OUT", *path, "output .gguf (written under a temporary name, renamed when complete)")->required();
  cmd->add_option("--vocab", o->head.vocab, "vocabulary rows")->capture_default_str();
  cmd->add_option("--hidden", o->head.hidden, "hidden size")->capture_default_str();
  cmd->add_option("--type", o->type, "head type: q5_K, q4_K, q6_K, q8_0, f16, bf16, f32")->capture_default_str();
  cmd->add_option("--arch", o->head.arch, "general.architecture")->capture_default_str();
  cmd->add_option("--logit-scale", o->head.logit_scale, "ARCH.logit_scale")->capture_default_str();
  cmd->add_option("--softcap", o->head.softcap, "ARCH.final_logit_softcapping (0 disables)")->capture_default_str();
  cmd->add_option("--seed", o->head.seed, "random seed")->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "no progress bar");
  return [=]() {
    make_checkpoint(*path, *o);
    std::printf("wrote %s\n", path->c_str());
    return 0;
  };
}

}  // namespace lmhead::cli
