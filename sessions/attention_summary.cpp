#include "sessions/attention_summary.h"

#include <map>

namespace kvscope {

Result<std::vector<HeadSummary>> summarize_attention(SessionReader& reader, int32_t recent) {
    if (recent < 1) return Error{"the recent window must hold at least one token"};
    auto heads = reader.captured_heads();
    if (!heads) return heads.error();
    std::vector<HeadSummary> out;
    for (auto [layer, head] : *heads) {
        HeadSummary s;
        s.layer = layer;
        s.head = head;
        // Every request: rows per request are what the reader serves.
        for (int32_t request : reader.captured_requests(layer, head)) {
            auto rows = reader.attention(request, layer, head, reader.last_step());
            if (!rows) return rows.error();
            std::map<int32_t, const AttentionRow*> latest;  // recomputed rows: the last one
            for (const AttentionRow& r : *rows)
                latest[r.query_pos] = &r;
            for (const auto& [q, r] : latest) {
                if (q < recent || r->probs.size() < static_cast<size_t>(q) + 1) continue;
                double first = r->probs[0] / 255.0, near = 0;
                for (int32_t k = q - recent + 1; k <= q; ++k)
                    near += r->probs[static_cast<size_t>(k)] / 255.0;
                s.mean_on_first += first;
                s.mean_on_recent += near;
                ++s.rows;
            }
        }
        if (s.rows > 0) {
            s.mean_on_first /= static_cast<double>(s.rows);
            s.mean_on_recent /= static_cast<double>(s.rows);
        }
        out.push_back(s);
    }
    return out;
}

}  // namespace kvscope
