// Greedy token ids from llama.cpp, for checking kvscope's against them. Not part of the build:
// it is compiled beside a llama.cpp checkout (assets/train/LLAMA_CPP_NOTES.md says how).
//
//   llamacpp_greedy_ids MODEL N THREADS PROMPT [KV]  prints BOS + the prompt's ids, then N greedy
//   ids,
//                                                 space-separated on one line; KV is the
//                                                 K/V cache type, f16 (default) or f32
//
// Every prompt token goes in one batch, then one token per decode, argmax of the last logits
// (lowest id on ties), as `kvscope generate --print-ids` does.
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: %s MODEL N THREADS PROMPT [f16|f32]\n", argv[0]);
        return 2;
    }
    const int n_new = std::atoi(argv[2]);
    const int threads = std::atoi(argv[3]);
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    llama_backend_init();
    llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = 512;
    cparams.n_batch = 512;
    cparams.n_threads = threads;
    cparams.n_threads_batch = threads;
    // The K/V cache's type: llama.cpp's default is f16.
    if (argc == 6 && std::strcmp(argv[5], "f32") == 0)
        cparams.type_k = cparams.type_v = GGML_TYPE_F32;
    llama_context* ctx = llama_init_from_model(model, cparams);

    std::vector<llama_token> ids(512);
    const int n = llama_tokenize(vocab, argv[4], static_cast<int>(std::strlen(argv[4])), ids.data(),
                                 static_cast<int>(ids.size()), /*add_special=*/true,
                                 /*parse_special=*/false);
    if (n < 0) return 1;
    ids.resize(n);
    std::vector<llama_token> feed = ids;
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n_new; ++i) {
        if (llama_decode(ctx, llama_batch_get_one(feed.data(), static_cast<int>(feed.size()))) != 0)
            return 1;
        const float* logits = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (llama_token t = 1; t < n_vocab; ++t)
            if (logits[t] > logits[best]) best = t;
        ids.push_back(best);
        feed.assign(1, best);
    }
    for (size_t i = 0; i < ids.size(); ++i)
        std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
