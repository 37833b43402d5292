// Model loading on arbitrary bytes, the way load_model() sees a file: GGUF (header, metadata,
// tensor table), then the model built from it (config checks, shape checks, dequantization,
// tokenizer), and every weight it hands out read end to end, so that a view past the data
// is caught by ASan; anything else goes to the llama2.c loader. Loading may fail; it must
// never crash, leak, hang or read out of bounds.
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "engine/gguf_file.h"
#include "engine/gguf_model.h"
#include "engine/llama2c_loader.h"

namespace {

float touch(const float* p, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i)
        sum += p[i];
    return sum;
}

void touch_weights(const kvscope::LoadedModel& m) {
    const kvscope::ModelWeights& w = m.weights;
    auto matrix = [](const kvscope::Matrix& x) {
        float sum = 0.0f;  // every byte, whatever the type: a bad offset faults here
        for (int64_t i = 0; i < x.bytes(); ++i)
            sum += static_cast<const uint8_t*>(x.data)[i];
        return sum;
    };
    auto vector = [](const kvscope::Vector& x) { return touch(x.data, x.size); };
    volatile float sink = matrix(w.token_embedding) + matrix(w.output) + vector(w.output_norm);
    for (const kvscope::LayerWeights& l : w.layers)
        sink = sink + vector(l.attn_norm) + matrix(l.wq) + matrix(l.wk) + matrix(l.wv) +
               matrix(l.wo) + vector(l.bq) + vector(l.bk) + vector(l.bv) + vector(l.ffn_norm) +
               matrix(l.w_gate) + matrix(l.w_up) + matrix(l.w_down);
    (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
        auto m = kvscope::llama2c_from_bytes(bytes, nullptr, "fuzz.bin");
        if (m) touch_weights(*m);
        return 0;
    }
    auto f = kvscope::GgufFile::parse(bytes, "fuzz.gguf");
    if (!f) return 0;
    for (const auto& t : f->tensors()) {  // both ends of every tensor's data
        volatile uint8_t first = f->data(t)[0];
        volatile uint8_t last = f->data(t)[t.size_bytes - 1];
        (void)first;
        (void)last;
    }
    auto m =
        kvscope::model_from_gguf(std::make_shared<const kvscope::GgufFile>(std::move(f).value()));
    if (!m) return 0;
    touch_weights(*m);
    if (m->tokenizer) {
        auto ids = m->tokenizer->encode("hello world \xc3\xa9 \xff 12", true);
        (void)m->tokenizer->decode(ids);
    }
    return 0;
}
