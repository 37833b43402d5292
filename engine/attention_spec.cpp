#include "engine/attention_spec.h"

#include <sstream>

#include "base/terminal_text.h"

namespace kvscope {

Result<std::vector<uint8_t>> parse_attention_spec(const std::string& spec, const ModelConfig& c) {
    std::vector<uint8_t> wanted(static_cast<size_t>(c.n_layers) * c.n_heads, 0);
    if (spec.empty() || spec == "none") return wanted;
    if (spec == "all") {
        wanted.assign(wanted.size(), 1);
        return wanted;
    }
    std::stringstream in(spec);
    std::string item;
    while (std::getline(in, item, ',')) {
        auto colon = item.find(':');
        if (colon == std::string::npos)
            return Error{"attention capture " + quote_for_message(item) + " is not LAYER:HEAD"};
        auto parse = [&](const std::string& s, int limit, const char* what, int& lo,
                         int& hi) -> Status {
            if (s == "*") {
                lo = 0;
                hi = limit - 1;
                return {};
            }
            char* end = nullptr;
            long v = std::strtol(s.c_str(), &end, 10);
            if (s.empty() || *end != '\0' || v < 0 || v >= limit)
                return Error{std::string("attention capture: ") + what + " " +
                             quote_for_message(s) + " is not between 0 and " +
                             std::to_string(limit - 1)};
            lo = hi = static_cast<int>(v);
            return {};
        };
        int l0, l1, h0, h1;
        if (Status s = parse(item.substr(0, colon), c.n_layers, "layer", l0, l1); !s)
            return s.error();
        if (Status s = parse(item.substr(colon + 1), c.n_heads, "head", h0, h1); !s)
            return s.error();
        for (int l = l0; l <= l1; ++l)
            for (int h = h0; h <= h1; ++h)
                wanted[static_cast<size_t>(l * c.n_heads + h)] = 1;
    }
    return wanted;
}

}  // namespace kvscope
