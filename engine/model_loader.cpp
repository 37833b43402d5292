#include "engine/model_loader.h"

#include <cstring>
#include <exception>
#include <new>

#include "engine/gguf_file.h"
#include "engine/gguf_model.h"
#include "engine/llama2c_loader.h"
#include "engine/mapped_file.h"
#include "engine/synthetic_model.h"

namespace kvscope {

namespace {
Result<LoadedModel> load(const std::string& path) {
    auto mapped = MappedFile::open(path);
    if (!mapped) return mapped.error();
    std::unique_ptr<MappedFile> file = std::move(mapped).value();
    const auto bytes = file->bytes();
    if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) {
        auto gguf = GgufFile::from_mapping(std::move(file));
        if (!gguf) return gguf.error();
        return model_from_gguf(std::make_shared<const GgufFile>(std::move(gguf).value()));
    }
    // No magic: llama2.c files have none, so a header that makes no sense means the file is
    // neither format, which is what the user needs to hear.
    if (Status s = validate_llama2c_header(bytes); !s)
        return Error{path + ": not a GGUF file (it does not start with \"GGUF\") nor a llama2.c " +
                     "checkpoint (" + s.error().message + ")"};
    std::shared_ptr<const MappedFile> shared = std::move(file);
    return llama2c_from_bytes(bytes, shared, path);
}
}  // namespace

Result<LoadedModel> load_model(const std::string& path) {
    try {
        if (is_synthetic_model(path)) return make_synthetic_model(path);
        auto loaded = load(path);
        // The file shrinking while it was read gives zeros, not an error (mapped_file.h).
        if (Status unchanged = MappedFile::check_unchanged(); !unchanged) return unchanged.error();
        return loaded;
    } catch (const std::bad_alloc&) {
        return Error{path + ": out of memory while loading the model"};
    } catch (const std::exception& e) {
        return Error{path + ": cannot load the model: " + e.what()};
    }
}

Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const std::string& path) {
    const std::string none = ": has no tokenizer (give token ids: --prompt-ids)";
    if (is_synthetic_model(path)) return Error{path + none};
    try {
        auto mapped = MappedFile::open(path);
        if (!mapped) return mapped.error();
        const auto bytes = mapped.value()->bytes();
        if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0) {
            // A llama2.c checkpoint carries no vocabulary; anything else is neither format.
            if (Status s = validate_llama2c_header(bytes); !s)
                return Error{path + ": not a GGUF file (it does not start with \"GGUF\") nor a " +
                             "llama2.c checkpoint (" + s.error().message + ")"};
            return Error{path + none};
        }
        auto gguf = GgufFile::from_mapping(std::move(mapped).value());
        if (!gguf) return gguf.error();
        if (!gguf->find("tokenizer.ggml.model")) return Error{path + none};
        auto tok = Tokenizer::from_gguf(gguf.value());
        if (Status unchanged = MappedFile::check_unchanged(); !unchanged) return unchanged.error();
        if (!tok) {
            const std::string& msg = tok.error().message;
            return Error{msg.rfind(path + ":", 0) == 0 ? msg : path + ": " + msg};
        }
        return std::shared_ptr<const Tokenizer>(std::move(tok).value());
    } catch (const std::bad_alloc&) {
        return Error{path + ": out of memory while loading the tokenizer"};
    }
}

}  // namespace kvscope
