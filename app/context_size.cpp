#include "app/context_size.h"

#include <cstdio>

namespace kvscope::app {

namespace {
constexpr int32_t kMaxCtxSize = 1 << 20;
}

void add_ctx_size_flag(CLI::App& sub, int32_t& ctx_size) {
    sub.add_option("--ctx-size", ctx_size,
                   "Context to serve in tokens (0 = the model's trained context; past it the "
                   "model is out of its training range)")
        ->check(CLI::Range(0, kMaxCtxSize))
        ->capture_default_str();
}

Result<std::shared_ptr<const LoadedModel>> load_model_with_context(const std::string& path,
                                                                   int32_t ctx_size) {
    auto loaded = load_model(path);
    if (!loaded) return loaded.error();
    LoadedModel model = std::move(loaded).value();
    if (ctx_size > 0 && ctx_size != model.config.context_length) {
        if (ctx_size > model.config.context_length)
            std::fprintf(stderr,
                         "note: --ctx-size %d is past the %d tokens the model was trained on; "
                         "text beyond them is out of its range\n",
                         ctx_size, model.config.context_length);
        model.config.context_length = ctx_size;
    }
    return std::make_shared<const LoadedModel>(std::move(model));
}

}  // namespace kvscope::app
