#pragma once
// JSON kvscope reads (workload lines, a session's run info, the bandwidth cache) goes through
// parse_json, which bounds how deep arrays and objects nest before nlohmann sees the text:
// its parser keeps its own stack, but what it builds is walked recursively (dump(), copies,
// comparisons), and a workload line of a million nested arrays overflowed the stack in the
// error message that quoted it. Nothing in kvscope nests deeper than a few levels.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/result.h"

namespace kvscope {

inline constexpr int kMaxJsonDepth = 64;

// The value, or "not valid JSON (at byte N)", "a number too large for JSON", "arrays and
// objects nested more than 64 deep". The messages never quote the text.
Result<nlohmann::json> parse_json(std::string_view text, int max_depth = kMaxJsonDepth);

// A JSON value as an error message shows it, one short line whatever its size: numbers,
// true, false and null as written, a string quoted and cut, an array or object by its kind.
std::string json_for_message(const nlohmann::json& value);

}  // namespace kvscope
