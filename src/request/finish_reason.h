// Why a generation ended: one set of reasons for every layer (engine events, the server's events,
// the CLI's output, /metrics labels). Each API maps them to its own words in one place
// (OpenAI: openai_finish, TGI: tgi_finish).
// Must never grow protocol-specific values; a new reason is a new fact about generation.
#pragma once

#include <cstdint>

namespace fg {

enum class FinishReason : uint8_t {
  kLength,      // max_new_tokens reached, or the model's context or the KV pool is full
  kEos,         // one of the model's end-of-sequence tokens (kept in the output)
  kStopToken,   // one of the request's stop_token_ids (kept in the output)
  kStopString,  // one of the request's stop strings (the text is cut before it)
  kCancelled,   // cancelled by the client or by the server shutting down
  kError,       // the request failed; a Status beside the reason says why
};

// "length", "eos", "stop_token", "stop_string", "cancelled", "error".
const char* finish_reason_name(FinishReason r);

}  // namespace fg
