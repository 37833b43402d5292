#include "base/json_input.h"

#include "base/terminal_text.h"

namespace kvscope {

namespace {
// Whether arrays and objects in `text` nest deeper than `max_depth`, by a scan that knows
// strings (a bracket inside one is text) and nothing else: what is not valid JSON is the
// parser's to report.
bool nests_deeper_than(std::string_view text, int max_depth) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;  // the escaped character, a quote or a backslash included
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return true;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return false;
}
}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, int max_depth) {
    if (nests_deeper_than(text, max_depth))
        return Error{"arrays and objects nested more than " + std::to_string(max_depth) + " deep"};
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        return Error{"not valid JSON (at byte " + std::to_string(e.byte) + ")"};
    } catch (const nlohmann::json::out_of_range&) {
        return Error{"not valid JSON: a number too large"};  // 1e999: no double holds it
    } catch (const nlohmann::json::exception&) {
        return Error{"not valid JSON"};
    }
}

std::string json_for_message(const nlohmann::json& value) {
    switch (value.type()) {
        case nlohmann::json::value_t::string:
            return "the string " + quote_for_message(value.get_ref<const std::string&>());
        case nlohmann::json::value_t::array:
            return "an array of " + std::to_string(value.size());
        case nlohmann::json::value_t::object:
            return "an object of " + std::to_string(value.size()) + " fields";
        default:
            return value.dump();  // a number, true, false or null: short
    }
}

}  // namespace kvscope
