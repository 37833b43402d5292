#include "engine/q4_0_interleaved.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace kvscope {

namespace {

constexpr int64_t kQ4_0BlockBytes = 18;  // fp16 scale, 16 bytes of nibbles

int64_t groups_of(int rows) {
    return (rows + kInterleavedRows - 1) / kInterleavedRows;
}

}  // namespace

int64_t interleaved_q4_0_bytes(int rows, int cols) {
    return groups_of(rows) * (cols / 32) * (kInterleavedCodeBytes + kInterleavedScaleBytes);
}

InterleavedQ4_0View interleaved_q4_0_view(const uint8_t* data, int rows, int cols) {
    InterleavedQ4_0View v;
    v.groups = static_cast<int>(groups_of(rows));
    v.blocks = cols / 32;
    v.codes = data;
    v.scales = data + static_cast<int64_t>(v.groups) * v.blocks * kInterleavedCodeBytes;
    return v;
}

InterleavedQ4_0View interleave_q4_0(const Matrix& w, uint8_t* out) {
    InterleavedQ4_0View v = interleaved_q4_0_view(out, w.rows, w.cols);
    std::memset(out, 0, static_cast<size_t>(interleaved_q4_0_bytes(w.rows, w.cols)));
    uint8_t* codes = out;
    uint8_t* scales = const_cast<uint8_t*>(v.scales);
    for (int64_t g = 0; g < v.groups; ++g)
        for (int l = 0; l < kInterleavedRows; ++l) {
            const int64_t r = g * kInterleavedRows + l;
            if (r >= w.rows) break;  // padding rows stay zero: scale 0
            const uint8_t* row = w.row(r);
            for (int64_t b = 0; b < v.blocks; ++b) {
                const uint8_t* blk = row + b * kQ4_0BlockBytes;
                std::memcpy(scales + (g * v.blocks + b) * kInterleavedScaleBytes + 2 * l, blk, 2);
                uint8_t* dst = codes + (g * v.blocks + b) * kInterleavedCodeBytes + 4 * l;
                for (int m = 0; m < 4; ++m)
                    std::memcpy(dst + 64 * m, blk + 2 + 4 * m, 4);
            }
        }
    return v;
}

ModelWeights with_interleaved_q4_0(const ModelWeights& weights) {
    ModelWeights out = weights;
    auto interleave = [&](Matrix& m) {
        if (m.type != GgmlType::Q4_0 || m.interleaved || m.cols % 32 != 0) return;
        const size_t bytes = static_cast<size_t>(interleaved_q4_0_bytes(m.rows, m.cols));
        std::shared_ptr<uint8_t> buffer(
            static_cast<uint8_t*>(::operator new (bytes, std::align_val_t{64})),
            [](uint8_t* p) { ::operator delete (p, std::align_val_t{64}); });
        interleave_q4_0(m, buffer.get());
        m.interleaved = buffer.get();
        out.owners.push_back(std::move(buffer));
    };
    for (LayerWeights& l : out.layers)
        for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            interleave(*m);
    interleave(out.output);
    return out;
}

}  // namespace kvscope
