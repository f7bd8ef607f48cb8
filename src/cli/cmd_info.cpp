#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.hpp"

namespace lmhead::cli {

Action register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show a checkpoint's head: shapes, type, metadata in force, byte bill");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("MODEL", *path, "GGUF checkpoint")->required();
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [=]() {
    auto model = Model::open(*path);
    const HeadConfig& c = model->config();
    const ByteBill b = byte_bill(c);
    if (*json) {
      nlohmann::json j = {
          {"path", *path}, {"architecture", c.architecture}, {"hidden", c.hidden}, {"vocab", c.vocab},
          {"head_tensor", c.head_tensor}, {"head_type", std::string(tensor_type_name(c.head_type))},
          {"tied", c.tied}, {"head_bytes", c.head_bytes}, {"row_bytes", c.row_bytes},
          {"logit_scale", {{"value", c.logit_scale}, {"default", c.logit_scale_is_default}}},
          {"softcap", {{"value", c.softcap}, {"default", c.softcap_is_default}}},
          {"eps", {{"value", c.eps}, {"default", c.eps_is_default}}},
          {"token_texts", model->has_token_texts()},
          {"byte_bill", {{"weights", b.weights}, {"normed", b.normed}, {"logits", b.logits},
                         {"softcap_nodes", b.softcap_nodes}, {"softcap_one_pass", b.softcap_one_pass},
                         {"argmax", b.argmax}}}};
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    auto dflt = [](bool d) { return d ? "  (default: absent from the file)" : ""; };
    std::printf("checkpoint    %s\n", path->c_str());
    std::printf("architecture  %s\n", c.architecture.c_str());
    std::printf("head          %s, %s, %s rows x %s, %s B (%s B per row)\n", c.head_tensor.c_str(),
                std::string(tensor_type_name(c.head_type)).c_str(), with_commas(c.vocab).c_str(),
                with_commas(c.hidden).c_str(), with_commas(c.head_bytes).c_str(), with_commas(c.row_bytes).c_str());
    if (c.tied) std::printf("              tied head: no 'output.weight', using 'token_embd.weight'\n");
    std::printf("logit_scale   %.9g%s\n", c.logit_scale, dflt(c.logit_scale_is_default));
    if (c.softcap == 0)
      std::printf("soft cap      0 (disabled: scale only)%s\n", dflt(c.softcap_is_default));
    else
      std::printf("soft cap      %.9g%s\n", c.softcap, dflt(c.softcap_is_default));
    std::printf("rms eps       %.9g%s\n", c.eps, dflt(c.eps_is_default));
    std::printf("token texts   %s\n", model->has_token_texts() ? "yes" : "no (ids only)");
    print_byte_bill(c);
    return 0;
  };
}

}  // namespace lmhead::cli
