#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common.hpp"

namespace lmhead::cli {

Action register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show a checkpoint's head: shapes, type, metadata in force, byte bill");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto model_args = std::make_shared<ModelArgs>();
  cmd->add_option("MODEL", *path, "GGUF checkpoint")->required();
  cmd->add_flag("--json", *json, "Print one JSON object");
  add_model_options(*cmd, *model_args);
  return [=]() {
    auto model = Model::open(*path, model_args->options());
    const HeadConfig& c = model->config();
    const ByteBill b = byte_bill(c);
    std::error_code size_error;
    const uint64_t file_bytes = std::filesystem::file_size(*path, size_error);
    nlohmann::json moved = nlohmann::json::object();
    for (BackendKind k : {BackendKind::scalar, BackendKind::cpu, BackendKind::cuda}) {
      const ByteBill m = byte_bill(c, k, SoftcapRoute::nodes);
      moved[std::string(to_string(k))] = {{"bytes", m.moved}, {"cap_passes", m.cap_passes},
                                          {"logits_stored", m.logits_stored}};
    }
    if (*json) {
      nlohmann::json j = {
          {"path", *path}, {"architecture", c.architecture}, {"hidden", c.hidden}, {"vocab", c.vocab},
          {"head_tensor", c.head_tensor}, {"head_type", std::string(tensor_type_name(c.head_type))},
          {"tied", c.tied}, {"head_bytes", c.head_bytes}, {"row_bytes", c.row_bytes},
          {"rule", {{"source", c.rule_source}, {"logit_scale", c.logit_scale_rule}, {"softcap", c.softcap_rule},
                    {"final_norm", c.final_norm}, {"head_bias", c.has_head_bias}}},
          {"logit_scale", {{"value", c.logit_scale}, {"stated", c.logit_scale_stated},
                           {"from", std::string(to_string(c.logit_scale_from))}, {"default", c.logit_scale_is_default}}},
          {"softcap", {{"value", c.softcap}, {"from", std::string(to_string(c.softcap_from))},
                       {"default", c.softcap_is_default}}},
          {"eps", {{"value", c.eps}, {"key", c.eps_key}, {"from", std::string(to_string(c.eps_from))},
                   {"default", c.eps_is_default}}},
          {"overrides", c.overrides},
          {"token_texts", model->has_token_texts()},
          {"byte_bill", {{"weights", b.weights}, {"normed", b.normed}, {"logits", b.logits},
                         {"softcap_nodes", b.softcap_nodes}, {"softcap_one_pass", b.softcap_one_pass},
                         {"argmax", b.argmax}, {"head_bias", b.head_bias}, {"bits_per_weight", b.bits_per_weight},
                         {"file_bytes", file_bytes},
                         {"head_share_of_file", file_bytes > 0 ? double(b.weights) / double(file_bytes) : 0.0},
                         {"q4_k_weights", b.q4_k_weights}, {"moved_by_backend", moved}}}};
      nlohmann::json paths = nlohmann::json::array();
      for (const PathRange& r : llamacpp_path_ranges(c))
        paths.push_back({{"first_tokens", r.first}, {"last_tokens", r.last == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.last)},
                         {"path", r.path}, {"why", r.why}});
      j["llamacpp"] = {{"version", "0c1e570"}, {"paths", paths}};
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    auto from = [](ValueSource v) -> std::string {
      switch (v) {
        case ValueSource::file: return "  (from the file)";
        case ValueSource::arch_default: return "  (the architecture's default: absent from the file)";
        case ValueSource::override_kv: return "  (from --override-kv)";
        case ValueSource::not_applied: return "  (not applied by this architecture: any value in the file is ignored)";
      }
      return "";
    };
    std::printf("checkpoint    %s\n", path->c_str());
    std::printf("architecture  %s\n", c.architecture.c_str());
    std::printf("head          %s, %s, %s rows x %s, %s B (%s B per row)\n", c.head_tensor.c_str(),
                std::string(tensor_type_name(c.head_type)).c_str(), with_commas(c.vocab).c_str(),
                with_commas(c.hidden).c_str(), with_commas(c.head_bytes).c_str(), with_commas(c.row_bytes).c_str());
    if (c.tied) std::printf("              tied head: no 'output.weight', using 'token_embd.weight'\n");
    std::printf("rule          %s (llama.cpp %s): logit scale %s, soft cap %s, final norm %s\n", c.architecture.c_str(),
                c.rule_source.c_str(), c.logit_scale_rule.c_str(), c.softcap_rule.c_str(), c.final_norm.c_str());
    if (c.logit_scale != c.logit_scale_stated)
      std::printf("logit_scale   x %.9g (1 / %.9g)%s\n", c.logit_scale, c.logit_scale_stated, from(c.logit_scale_from).c_str());
    else
      std::printf("logit_scale   %.9g%s\n", c.logit_scale, from(c.logit_scale_from).c_str());
    if (c.softcap == 0)
      std::printf("soft cap      0 (disabled: scale only)%s\n", from(c.softcap_from).c_str());
    else
      std::printf("soft cap      %.9g%s\n", c.softcap, from(c.softcap_from).c_str());
    std::printf("norm eps      %.9g (%s)%s\n", c.eps, c.eps_key.c_str(), from(c.eps_from).c_str());
    if (c.has_head_bias) std::printf("head bias     'output.bias' (added to the raw logits, before scale and cap)\n");
    for (const std::string& o : c.overrides) std::printf("override      %s\n", o.c_str());
    for (const PathRange& r : llamacpp_path_ranges(c)) {
      const std::string ts = r.last == 0 ? "T >= " + std::to_string(r.first)
                             : r.first == r.last ? "T = " + std::to_string(r.first)
                             : "T = " + std::to_string(r.first) + ".." + std::to_string(r.last);
      std::printf("llama.cpp     %-10s %s (0c1e570: %s)\n", ts.c_str(), r.path.c_str(), r.why.c_str());
    }
    std::printf("token texts   %s\n", model->has_token_texts() ? "yes" : "no (ids only)");
    print_byte_bill(c, size_error ? 0 : file_bytes);
    return 0;
  };
}

}  // namespace lmhead::cli
