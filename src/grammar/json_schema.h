// JSON Schema -> Grammar: outputs that parse as JSON and validate against the schema.
//
// Supported: type (one or a list; inferred from the keywords when absent), enum, const, nullable
// (OpenAPI), properties / required / additionalProperties (false, true or a schema), items /
// prefixItems (and the older items-array / additionalItems), minItems / maxItems, uniqueItems
// false, minLength / maxLength, pattern (ECMA-262 search semantics, regex.h's subset), format
// (date-time, date, time, duration, uuid, email, hostname, ipv4, ipv6, uri), minimum / maximum /
// exclusiveMinimum / exclusiveMaximum (any bound on integers; integer-valued bounds on numbers),
// anyOf, oneOf (generated as anyOf: exact when the alternatives exclude each other, as
// discriminated unions do), allOf (merged when the parts use disjoint keywords), $ref to "#",
// "#/$defs/..", "#/definitions/.." or any JSON pointer in the document, recursion included.
// Annotations (title, description, default, examples, $comment, ...) and keywords JSON Schema
// does not define are ignored, as the specification says.
// Refused with kUnsupported, "unsupported JSON Schema keyword 'X' at #/path": not, if/then/else,
// multipleOf, patternProperties, propertyNames, min/maxProperties, dependentRequired,
// dependentSchemas, dependencies, unevaluatedProperties/Items, contains, uniqueItems true,
// $dynamicRef, and combinations the grammar cannot express exactly (pattern or format with
// length bounds, non-integer bounds on numbers).
//
// Generation choices (every output still validates): properties appear in the schema's order;
// when `properties` is given and additionalProperties is absent, no other property is generated
// (JsonSchemaOptions::strict_properties); whitespace follows JsonWhitespace; strings are
// canonical (json_pieces.h); integers without bounds have at most 18 digits, numbers at most 15
// integer and 15 fraction digits and a 2-digit exponent, numbers with bounds no exponent and at
// most 6 fraction digits.
// Must never depend on a tokenizer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"
#include "grammar/json_pieces.h"

namespace fg::grammar {

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kSpaced;
  // With `properties` given and additionalProperties absent, generate only the listed properties.
  // false: also generate other properties of any value (JSON Schema's default meaning).
  bool strict_properties = true;
  GrammarLimits limits;
};

// Errors: kInvalidArgument (not JSON, malformed schema, unresolvable $ref, a schema no value
// satisfies, a grammar past the limits), kUnsupported (a keyword or format named in the message).
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});
Result<Grammar> compile_json_schema(std::string_view schema_text, const JsonSchemaOptions& options = {});

// Any JSON object (OpenAI response_format json_object).
Result<Grammar> json_object_grammar(const JsonSchemaOptions& options = {});

// Adds a rule matching values of `schema` to a builder other grammars are being built in (tool
// calls embed each tool's parameter schema); `pieces` must be bound to the same builder. "#" in
// the schema's $refs means `schema` itself.
Result<int32_t> add_json_schema_rule(GrammarBuilder& builder, JsonPieces& pieces, const nlohmann::ordered_json& schema,
                                     const JsonSchemaOptions& options, const std::string& name);

}  // namespace fg::grammar
