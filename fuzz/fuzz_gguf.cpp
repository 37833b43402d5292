// GGUF parser and model builder on arbitrary bytes: every accepted file must also build (or
// refuse) a model without reading out of bounds.
#include <cstdint>
#include <memory>

#include "engine/gguf_file.h"
#include "engine/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto f = kvscope::GgufFile::parse({data, size}, "fuzz.gguf");
    if (!f) return 0;
    for (const auto& t : f->tensors()) {
        volatile uint8_t sink = t.size_bytes ? f->data(t)[t.size_bytes - 1] : 0;
        (void)sink;
    }
    auto m =
        kvscope::model_from_gguf(std::make_shared<const kvscope::GgufFile>(std::move(f).value()));
    if (m && m->tokenizer) (void)m->tokenizer->encode("hello world \xc3\xa9", true);
    return 0;
}
