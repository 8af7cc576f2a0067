// Post-processors of tokenizer.json, reduced to what a single sequence needs: the ids put
// before and after the encoded text when special tokens are requested. Supported:
// TemplateProcessing (single template), RobertaProcessing / BertProcessing (cls ... sep),
// ByteLevel (no id change), Sequence. Anything else is refused at load time.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg::tok {

struct SpecialTokenWrap {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

// Reads the "post_processor" object (null gives an empty wrap). `where` names the file.
Result<SpecialTokenWrap> make_post_processor(const nlohmann::json& j, const std::string& where);

}  // namespace fg::tok
