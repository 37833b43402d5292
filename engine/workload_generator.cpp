#include "engine/workload_generator.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/tokenizer.h"

namespace kvscope {

Result<WorkloadKind> parse_workload_kind(const std::string& name) {
    if (name == "chat") return WorkloadKind::kChat;
    if (name == "shared-prefix") return WorkloadKind::kSharedPrefix;
    if (name == "long-tail") return WorkloadKind::kLongTail;
    if (name == "burst") return WorkloadKind::kBurst;
    return Error{"unknown workload kind '" + name + "' (chat, shared-prefix, long-tail, burst)"};
}

namespace {
// Public-domain lines (King James Bible), the register of the bundled model's corpus.
const char* const kLines[] = {
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And God said, Let there be light: and there was light.",
    "The LORD is my shepherd; I shall not want.",
    "He maketh me to lie down in green pastures: he leadeth me beside the still waters.",
    "To every thing there is a season, and a time to every purpose under the heaven:",
    "A time to be born, and a time to die; a time to plant, and a time to pluck up that which is "
    "planted;",
    "Blessed are the meek: for they shall inherit the earth.",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel,",
    "Then Jesus answered and said unto them, Verily, verily, I say unto you,",
    "And it came to pass in those days, that there went out a decree from Caesar Augustus,",
    "Wisdom is the principal thing; therefore get wisdom: and with all thy getting get "
    "understanding.",
    "The heavens declare the glory of God; and the firmament sheweth his handywork.",
    "And he said, Go forth, and stand upon the mount before the LORD.",
    "Let not your heart be troubled: ye believe in God, believe also in me.",
    "For the wages of sin is death; but the gift of God is eternal life.",
    "And the king said unto the prophet, What shall we do?",
    "Hear, O Israel: The LORD our God is one LORD:",
    "And they went forth, and preached every where, the Lord working with them,",
    "Now faith is the substance of things hoped for, the evidence of things not seen.",
};
constexpr int kNumLines = sizeof(kLines) / sizeof(kLines[0]);

struct Builder {
    const Tokenizer* tok;
    int32_t vocab;
    std::mt19937_64& rng;

    // A text (or ids) of about `tokens` tokens.
    void fill(std::string& text, std::vector<int32_t>& ids, int32_t tokens) {
        if (!tok) {
            for (int32_t i = 0; i < tokens; ++i)
                ids.push_back(3 + static_cast<int32_t>(
                                      rng() % static_cast<uint64_t>(std::max(vocab - 3, 1))));
            return;
        }
        while (static_cast<int32_t>(tok->encode(text, false).size()) < tokens) {
            if (!text.empty()) text += ' ';
            text += kLines[rng() % kNumLines];
        }
    }
};

int32_t clamp_len(double v, int32_t lo, int32_t hi) {
    return std::clamp(static_cast<int32_t>(std::lround(v)), lo, hi);
}
}  // namespace

void generate_workload(WorkloadKind kind, int32_t count, uint64_t seed, const Tokenizer* tokenizer,
                       int32_t vocab_size, int32_t context_length,
                       const std::function<bool(const GeneratedRequest&)>& take) {
    std::mt19937_64 rng(seed);
    Builder b{tokenizer, vocab_size, rng};
    const int32_t ctx = context_length;
    // Turn lengths in absolute tokens, as long as real chat allows within the context (ShareGPT,
    // vLLM's benchmark set, averages 161 prompt and 338 output tokens). Half a block per request
    // is lost to the last block's slack, so short turns would overstate paged waste.
    std::lognormal_distribution<double> user_len(std::log(64.0), 0.6),
        out_len(std::log(128.0), 0.6);
    std::exponential_distribution<double> gap(kind == WorkloadKind::kBurst ? 4.0 : 0.7);

    // Shared prefixes: three system prompts (chat) or one long few-shot prefix.
    std::vector<std::string> prefix_text;
    std::vector<std::vector<int32_t>> prefix_ids;
    int n_prefixes = kind == WorkloadKind::kChat ? 3 : kind == WorkloadKind::kSharedPrefix ? 1 : 0;
    for (int i = 0; i < n_prefixes; ++i) {
        std::string t;
        std::vector<int32_t> ids;
        b.fill(t, ids, kind == WorkloadKind::kSharedPrefix ? ctx / 4 : ctx / 10);
        prefix_text.push_back(t);
        prefix_ids.push_back(ids);
    }

    double t = 0;
    for (int32_t i = 0; i < count; ++i) {
        GeneratedRequest g;
        Request& r = g.request;
        r.id = "r";
        r.id += std::to_string(i + 1);
        int32_t user = 0, max_out = 0;
        switch (kind) {
            case WorkloadKind::kChat:
            case WorkloadKind::kBurst:
                user = clamp_len(user_len(rng), 4, ctx / 3);
                max_out = clamp_len(out_len(rng), 8, ctx / 2);
                break;
            case WorkloadKind::kSharedPrefix:
                user = clamp_len(user_len(rng) / 5, 4, ctx / 8);
                max_out = clamp_len(out_len(rng) / 5, 4, ctx / 6);
                break;
            case WorkloadKind::kLongTail: {
                // Pareto tails: most requests short, a few near the context limit.
                std::uniform_real_distribution<double> u(0.0, 1.0);
                user = clamp_len(8.0 / std::pow(1.0 - u(rng), 1.0 / 1.3), 4, ctx / 2);
                max_out = clamp_len(16.0 / std::pow(1.0 - u(rng), 1.0 / 1.2), 4, ctx / 2);
                break;
            }
        }
        if (kind == WorkloadKind::kBurst) {
            // Quiet stretches, then a crowd arrives at once.
            if (i % 25 == 0 && i > 0) t += 30 + static_cast<double>(rng() % 30);
            t += gap(rng);
        } else {
            t += gap(rng);
        }
        r.arrival_step = static_cast<int64_t>(t);
        std::string text;
        std::vector<int32_t> ids;
        if (n_prefixes > 0) {
            size_t p = rng() % static_cast<uint64_t>(n_prefixes);
            text = prefix_text[p];
            ids = prefix_ids[p];
        }
        std::string user_text;
        b.fill(user_text, ids, user);
        if (tokenizer) {
            text += (text.empty() ? "" : "\n") + user_text;
            r.prompt = tokenizer->encode(text, tokenizer->wants_bos());
            g.prompt_text = text;
        } else {
            r.prompt = ids;
        }
        auto room = ctx - static_cast<int32_t>(r.prompt.size());
        r.max_tokens = std::max(1, std::min(max_out, room));
        r.sampling.seed = static_cast<uint64_t>(i + 1);
        if (!take(g)) return;
    }
}

std::vector<GeneratedRequest> generate_workload(WorkloadKind kind, int32_t count, uint64_t seed,
                                                const Tokenizer* tokenizer, int32_t vocab_size,
                                                int32_t context_length) {
    std::vector<GeneratedRequest> out;
    generate_workload(kind, count, seed, tokenizer, vocab_size, context_length,
                      [&](const GeneratedRequest& g) {
                          out.push_back(g);
                          return true;
                      });
    return out;
}

}  // namespace kvscope
