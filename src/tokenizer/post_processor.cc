// Post-processor loading (see post_processor.h).
#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "tokenizer/component_json.h"

namespace fg::tok {

namespace {

Result<SpecialTokenWrap> template_processing(const nlohmann::json& j, const std::string& ctx) {
  if (!j.contains("single") || !j["single"].is_array()) return invalid_argument(ctx + ": 'single' must be a list");
  const nlohmann::json specials = j.value("special_tokens", nlohmann::json::object());
  SpecialTokenWrap wrap;
  int sequences = 0;
  for (const auto& part : j["single"]) {
    if (part.contains("Sequence")) {
      const std::string id = part["Sequence"].value("id", "A");
      if (id != "A") return unsupported(ctx + ": the single template uses sequence $" + id);
      if (++sequences > 1) return unsupported(ctx + ": the single template repeats $A");
    } else if (part.contains("SpecialToken")) {
      const std::string name = part["SpecialToken"].value("id", "");
      auto it = specials.find(name);
      if (it == specials.end() || !it->contains("ids") || !(*it)["ids"].is_array())
        return invalid_argument(ctx + ": special token '" + name + "' is not defined in 'special_tokens'");
      auto& dst = sequences == 0 ? wrap.prefix : wrap.suffix;
      for (const auto& id : (*it)["ids"]) {
        if (!id.is_number_integer())
          return invalid_argument(ctx + ": special token '" + name + "' has a non-integer id");
        dst.push_back(id.get<int32_t>());
      }
    } else {
      return invalid_argument(ctx + ": unknown template piece " +
                              part.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  if (sequences != 1) return unsupported(ctx + ": the single template has no $A");
  return wrap;
}

Result<int32_t> pair_id(const nlohmann::json& j, const char* key, const std::string& ctx) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 || !j[key][1].is_number_integer())
    return invalid_argument(ctx + ": '" + key + "' must be [token, id]");
  return j[key][1].get<int32_t>();
}

}  // namespace

Result<SpecialTokenWrap> make_post_processor(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return SpecialTokenWrap{};
  const std::string type = component_type(j);
  const std::string ctx = where + ": post_processor " + type;
  if (type == "ByteLevel") return SpecialTokenWrap{};
  if (type == "TemplateProcessing") return template_processing(j, ctx);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    FG_ASSIGN_OR_RETURN(const int32_t cls, pair_id(j, "cls", ctx));
    FG_ASSIGN_OR_RETURN(const int32_t sep, pair_id(j, "sep", ctx));
    return SpecialTokenWrap{{cls}, {sep}};
  }
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      return invalid_argument(ctx + ": 'processors' must be a list");
    SpecialTokenWrap wrap;
    for (const auto& sub : j["processors"]) {
      FG_ASSIGN_OR_RETURN(SpecialTokenWrap w, make_post_processor(sub, where));
      // Each processor wraps the output of the previous one.
      w.prefix.insert(w.prefix.end(), wrap.prefix.begin(), wrap.prefix.end());
      wrap.suffix.insert(wrap.suffix.end(), w.suffix.begin(), w.suffix.end());
      wrap.prefix = std::move(w.prefix);
    }
    return wrap;
  }
  return component_unsupported(where, "post_processor", type);
}

}  // namespace fg::tok
