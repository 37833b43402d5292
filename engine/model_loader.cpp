#include "engine/model_loader.h"

#include <cstring>
#include <fstream>

#include "engine/gguf_model.h"
#include "engine/llama2c_loader.h"

namespace kvscope {

Result<LoadedModel> load_model(const std::string& path) {
    char magic[4] = {};
    {
        std::ifstream f(path, std::ios::binary);
        if (!f) return Error{path + ": cannot open the model file"};
        f.read(magic, 4);
    }
    if (std::memcmp(magic, "GGUF", 4) != 0) {
        auto m = load_llama2c(path);
        if (!m && m.error().message.find("not a valid llama2.c checkpoint") != std::string::npos)
            return Error{path + ": not a GGUF file (wrong magic) nor a llama2.c checkpoint (" +
                         m.error().message.substr(m.error().message.find('(') + 1)};
        return m;
    }
    auto file = GgufFile::open(path);
    if (!file) return file.error();
    return model_from_gguf(std::make_shared<const GgufFile>(std::move(file).value()));
}

}  // namespace kvscope
