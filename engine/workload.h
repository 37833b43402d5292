#pragma once
// Workload files: JSONL, one request per line:
//   {"id": "r1", "arrival_step": 0, "prompt": "..." | "prompt_ids": [..], "max_tokens": 64,
//    "temperature": 0, "top_p": 1, "seed": 1, "n": 1}
// Blank lines and lines starting with '#' are skipped. Errors name the line.

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/request.h"

namespace kvscope {

class Tokenizer;

// Larger workload files are refused before they are read.
inline constexpr size_t kMaxWorkloadBytes = size_t{1} << 30;

// Parses the whole file; the first bad line fails it ("workload.jsonl:7: unknown field
// 'max_token' (did you mean max_tokens?)"). A text prompt needs a tokenizer, and one that
// could never fit the model's context (by its size in bytes) is refused without encoding it;
// a request only somewhat too long stays, for the scheduler to reject with its reason.
Result<std::vector<Request>> parse_workload(std::string_view text, const std::string& name,
                                            const Tokenizer* tokenizer, int32_t vocab_size,
                                            int32_t context_length);
Result<std::vector<Request>> load_workload(const std::string& path, const Tokenizer* tokenizer,
                                           int32_t vocab_size, int32_t context_length);

// Request as one JSONL line (ids, not text), for writing generated workloads.
std::string request_to_json(const Request& r, const std::string& prompt_text);

}  // namespace kvscope
