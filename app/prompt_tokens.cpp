#include "app/prompt_tokens.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "base/terminal_text.h"

namespace kvscope::app {

Result<std::vector<int32_t>> parse_token_ids(const std::string& text, int32_t vocab_size) {
    std::vector<int32_t> ids;
    std::string item;
    std::string normalized = text;
    for (char& ch : normalized)
        if (ch == ',') ch = ' ';
    std::istringstream in(normalized);
    while (in >> item) {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(item.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE || v < 0 || v >= vocab_size) {
            std::ostringstream msg;
            msg << "prompt token " << quote_for_message(item) << " is not a token id between 0 and "
                << vocab_size - 1;
            return Error{msg.str()};
        }
        ids.push_back(static_cast<int32_t>(v));
    }
    if (ids.empty()) return Error{"--prompt-ids holds no token ids"};
    return ids;
}

Result<std::vector<int32_t>> prompt_tokens(const LoadedModel& model, const std::string& text,
                                           const std::string& ids) {
    if (!ids.empty()) return parse_token_ids(ids, model.config.vocab_size);
    if (!text.empty()) {
        if (!model.tokenizer)
            return Error{
                model.path +
                " has no tokenizer (llama2.c files carry none): pass the prompt as --prompt-ids"};
        if (Status s = model.tokenizer->check_fits(text, model.config.context_length, "--prompt");
            !s)
            return s.error();
        auto out = model.tokenizer->encode(text, model.tokenizer->wants_bos());
        if (out.empty()) return Error{"the prompt encodes to no tokens"};
        return out;
    }
    return std::vector<int32_t>{model.config.bos_token};
}

}  // namespace kvscope::app
