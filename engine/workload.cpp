#include "engine/workload.h"

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/input_file.h"
#include "base/json_input.h"
#include "base/terminal_text.h"
#include "engine/tokenizer.h"

namespace kvscope {

const char* sequence_state_name(SequenceState s) {
    switch (s) {
        case SequenceState::kWaiting:
            return "waiting";
        case SequenceState::kRunning:
            return "running";
        case SequenceState::kSwapped:
            return "swapped";
        case SequenceState::kFinished:
            return "finished";
        case SequenceState::kRejected:
            return "rejected";
    }
    return "unknown";
}

namespace {
using json = nlohmann::json;

constexpr int64_t kMaxTokensLimit = 1 << 20;
constexpr int64_t kMaxSamples = 64;
constexpr size_t kMaxPromptTokens = 1 << 20;

const std::set<std::string> kFields = {"id",         "arrival_step", "prompt",
                                       "prompt_ids", "max_tokens",   "temperature",
                                       "top_p",      "seed",         "n"};

Result<Request> parse_line(const std::string& line, const Tokenizer* tokenizer, int32_t vocab_size,
                           int32_t context_length, size_t index) {
    auto parsed = parse_json(line);
    if (!parsed) return parsed.error();
    const json& j = parsed.value();
    if (!j.is_object()) return Error{"expected a JSON object, not " + json_for_message(j)};
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!kFields.count(it.key())) {
            std::string known;
            for (const auto& f : kFields)
                known += (known.empty() ? "" : ", ") + f;
            return Error{"unknown field " + quote_for_message(it.key()) + " (known: " + known +
                         ")"};
        }
    // Every field is type-checked before use; the message shows what it held in a few words.
    auto wrong_type = [](const std::string& key, const char* type, const json& value) {
        return Error{"'" + key + "' must be " + type + ", not " + json_for_message(value)};
    };
    Request r;
    auto int_field = [&](const char* key, int64_t lo, int64_t hi, int64_t& out) -> Status {
        if (!j.contains(key)) return {};
        const json& v = j[key];
        if (!v.is_number_integer() && !v.is_number_unsigned())
            return wrong_type(key, "an integer", v);
        bool huge = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
        int64_t x = huge ? INT64_MAX : v.get<int64_t>();
        if (huge || x < lo || x > hi) {
            std::ostringstream m;
            m << "'" << key << "' is " << v.dump() << ", must be between " << lo << " and " << hi;
            return Error{m.str()};
        }
        out = x;
        return {};
    };
    if (j.contains("id")) {
        if (!j["id"].is_string()) return wrong_type("id", "a string", j["id"]);
        r.id = j["id"].get<std::string>();
    } else {
        r.id = "r";
        r.id += std::to_string(index + 1);  // (operator+ trips a GCC 12 -Wrestrict false positive)
    }
    int64_t arrival = 0, max_tokens = 64, n = 1, seed = 1;
    if (Status s = int_field("arrival_step", 0, INT32_MAX, arrival); !s) return s.error();
    if (Status s = int_field("max_tokens", 0, kMaxTokensLimit, max_tokens); !s) return s.error();
    if (Status s = int_field("n", 1, kMaxSamples, n); !s) return s.error();
    if (Status s = int_field("seed", 0, INT64_MAX, seed); !s) return s.error();
    r.arrival_step = arrival;
    r.max_tokens = static_cast<int32_t>(max_tokens);
    r.n = static_cast<int32_t>(n);
    r.sampling.seed = static_cast<uint64_t>(seed);
    for (const char* key : {"temperature", "top_p"}) {
        if (!j.contains(key)) continue;
        if (!j[key].is_number()) return wrong_type(key, "a number", j[key]);
        double v = j[key].get<double>();
        double hi = std::string(key) == "top_p" ? 1.0 : 100.0;
        if (!(v >= 0.0 && v <= hi)) {
            std::ostringstream m;
            m << "'" << key << "' is " << v << ", must be between 0 and " << hi;
            return Error{m.str()};
        }
        (std::string(key) == "top_p" ? r.sampling.top_p : r.sampling.temperature) =
            static_cast<float>(v);
    }
    bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_ids");
    if (has_text == has_ids) return Error{"give exactly one of 'prompt' (text) and 'prompt_ids'"};
    if (has_ids) {
        const json& ids = j["prompt_ids"];
        if (!ids.is_array()) return wrong_type("prompt_ids", "an array of token ids", ids);
        if (ids.size() > kMaxPromptTokens) return Error{"'prompt_ids' is absurdly long"};
        for (const json& t : ids) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
                std::ostringstream m;
                m << "'prompt_ids' holds " << json_for_message(t)
                  << ", not a token id between 0 and " << vocab_size - 1;
                return Error{m.str()};
            }
            r.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
    } else {
        if (!j["prompt"].is_string()) return wrong_type("prompt", "a string", j["prompt"]);
        if (!tokenizer)
            return Error{"'prompt' is text but the model has no tokenizer: use 'prompt_ids'"};
        const std::string& text = j["prompt"].get_ref<const std::string&>();
        if (Status s = tokenizer->check_fits(text, context_length, "'prompt'"); !s)
            return s.error();
        r.prompt = tokenizer->encode(text, tokenizer->wants_bos());
    }
    if (r.prompt.empty()) return Error{"the prompt is empty"};
    return r;
}
}  // namespace

Result<std::vector<Request>> parse_workload(std::string_view text, const std::string& name,
                                            const Tokenizer* tokenizer, int32_t vocab_size,
                                            int32_t context_length) {
    std::vector<Request> out;
    std::set<std::string> ids;
    size_t line_no = 0, start = 0;
    while (start <= text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string line(text.substr(start, end - start));
        ++line_no;
        start = end + 1;
        size_t first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos || line[first] == '#') continue;
        auto r = parse_line(line, tokenizer, vocab_size, context_length, out.size());
        if (!r) return Error{name + ":" + std::to_string(line_no) + ": " + r.error().message};
        if (!ids.insert(r->id).second)
            return Error{name + ":" + std::to_string(line_no) + ": duplicate request id " +
                         quote_for_message(r->id)};
        out.push_back(std::move(r).value());
    }
    if (out.empty()) return Error{name + ": no requests in the workload"};
    return out;
}

Result<std::vector<Request>> load_workload(const std::string& path, const Tokenizer* tokenizer,
                                           int32_t vocab_size, int32_t context_length) {
    auto text = read_input_file(path, "workload", kMaxWorkloadBytes);
    if (!text) return text.error();
    return parse_workload(text.value(), path, tokenizer, vocab_size, context_length);
}

std::string request_to_json(const Request& r, const std::string& prompt_text) {
    json j;
    j["id"] = r.id;
    j["arrival_step"] = r.arrival_step;
    if (!prompt_text.empty())
        j["prompt"] = prompt_text;
    else
        j["prompt_ids"] = r.prompt;
    j["max_tokens"] = r.max_tokens;
    j["temperature"] = r.sampling.temperature;
    if (r.sampling.top_p < 1.0f) j["top_p"] = r.sampling.top_p;
    j["seed"] = r.sampling.seed;
    j["n"] = r.n;
    return j.dump();
}

}  // namespace kvscope
