// Reasoning output: models that think before they answer (Qwen3, QwQ, DeepSeek-R1 and its
// distills, SmolLM3, Granite 3.3, ...) write the thinking between <think> and </think>, then the
// reply. The chat endpoint returns the two apart: the thinking as `reasoning_content` (the field
// the chat templates read back from the history, and DeepSeek's API's name), the rest as
// `content`, streamed as deltas of each.
//
// Text in, text out: never depends on the engine, the tokenizer or HTTP types. The markers must
// reach the splitter as text (the templates' models have them as ordinary added tokens).
#pragma once

#include <string>
#include <string_view>

namespace fg::server {

struct ReasoningMarkers {
  std::string start = "<think>";
  std::string end = "</think>";
};

// True when a chat template speaks of reasoning blocks (both markers appear in its source:
// templates of thinking models open the block in the generation prompt, or strip it from the
// history, or tell the model to write it).
bool template_has_reasoning(std::string_view chat_template_source, const ReasoningMarkers& markers = {});

// True when the rendered prompt leaves a reasoning block open (it ends with the start marker,
// whitespace aside: DeepSeek-R1's generation prompt), so the output begins inside it.
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers& markers = {});

// Splits one output, fed in pieces as it is generated, into reasoning and content. The reasoning
// is the text of the block (without the markers, trimmed of whitespace at both ends); the content
// is what follows the block (leading whitespace dropped), or the whole output, untouched, when it
// does not begin with a block (whitespace aside). An output cut off inside the block is all
// reasoning. Text that could still be part of a marker, trailing whitespace of the reasoning, and
// an incomplete UTF-8 character are held back until the next piece or finish().
class ReasoningSplitter {
 public:
  ReasoningSplitter(ReasoningMarkers markers, bool starts_inside);

  struct Piece {
    std::string reasoning;
    std::string content;
  };
  Piece feed(std::string_view text);
  Piece finish();  // the output ended: whatever was held back

  bool saw_reasoning() const { return saw_reasoning_; }

 private:
  enum class State {
    kLeading,         // before the output's first non-space text: a block may start
    kReasoningStart,  // inside the block, before its first non-space text
    kReasoning,       // inside the block
    kContentStart,    // after the block, before the content's first non-space text
    kContent,         // the rest passes through
  };
  Piece drain(bool final);

  ReasoningMarkers markers_;
  State state_ = State::kContent;
  std::string pending_;  // fed, not yet given out
  bool saw_reasoning_ = false;
};

}  // namespace fg::server
