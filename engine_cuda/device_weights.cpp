#include "engine_cuda/device_weights.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "engine/gguf_tensor_type.h"
#include "engine/thread_pool.h"

namespace kvscope::gpu {

using kernels::DType;

namespace {
// Converts row `r` of `m` into dst[0..cols) as `type`; false when a finite value became
// infinite (beyond f16's range).
bool convert_row(const Matrix& m, int64_t r, DType type, uint16_t* dst, std::vector<float>& row) {
    const auto cols = static_cast<size_t>(m.cols);
    if ((m.type == GgmlType::F16 && type == DType::kF16) ||
        (m.type == GgmlType::BF16 && type == DType::kBF16)) {
        std::memcpy(dst, m.row(r), cols * 2);  // already the bits wanted
        return true;
    }
    row.resize(cols);
    m.row_to_f32(r, row.data());
    bool fits = true;
    for (size_t i = 0; i < cols; ++i) {
        if (type == DType::kF16) {
            dst[i] = f32_to_fp16(row[i]);
            fits &= (dst[i] & 0x7c00u) != 0x7c00u || !std::isfinite(row[i]);
        } else {
            dst[i] = f32_to_bf16(row[i]);
        }
    }
    return fits;
}

int64_t vector_bytes(const Vector& v) {
    return v.data ? static_cast<int64_t>(v.size) * 4 : 0;
}
}  // namespace

int64_t DeviceWeights::device_bytes(const ModelConfig& config, const ModelWeights& weights) {
    auto matrix = [](const Matrix& m) { return static_cast<int64_t>(m.rows) * m.cols * 2; };
    int64_t b = matrix(weights.output) + vector_bytes(weights.output_norm);
    for (const LayerWeights& l : weights.layers)
        b += matrix(l.wq) + matrix(l.wk) + matrix(l.wv) + matrix(l.wo) + matrix(l.w_gate) +
             matrix(l.w_up) + matrix(l.w_down) + vector_bytes(l.attn_norm) +
             vector_bytes(l.ffn_norm) + vector_bytes(l.bq) + vector_bytes(l.bk) +
             vector_bytes(l.bv);
    (void)config;
    return b;
}

Result<DeviceMatrix> DeviceWeights::upload_stacked(const std::vector<const Matrix*>& parts,
                                                   CudaWeightType type, ThreadPool& pool,
                                                   const std::string& what) {
    const int cols = parts.front()->cols;
    std::vector<int64_t> first_row;  // of each part in the stack
    int64_t rows = 0;
    bool all_bf16 = true;
    for (const Matrix* m : parts) {
        first_row.push_back(rows);
        rows += m->rows;
        all_bf16 &= m->type == GgmlType::BF16;
    }
    DType t = type == CudaWeightType::kBF16  ? DType::kBF16
              : type == CudaWeightType::kF16 ? DType::kF16
              : all_bf16                     ? DType::kBF16
                                             : DType::kF16;
    std::vector<uint16_t> host(static_cast<size_t>(rows) * static_cast<size_t>(cols));
    auto convert = [&](DType to) {
        std::atomic<bool> fits{true};
        pool.parallel_for(rows, rows * cols * 8, [&](int64_t r0, int64_t r1) {
            std::vector<float> scratch;
            size_t part = 0;
            for (int64_t r = r0; r < r1; ++r) {
                while (part + 1 < parts.size() && r >= first_row[part + 1])
                    ++part;
                if (!convert_row(*parts[part], r - first_row[part], to,
                                 &host[static_cast<size_t>(r) * static_cast<size_t>(cols)],
                                 scratch))
                    fits = false;
            }
        });
        return fits.load();
    };
    if (!convert(t)) {
        if (type == CudaWeightType::kF16)
            return Error{what + " holds values beyond f16's range (65504): load it as bf16"};
        t = DType::kBF16;  // bf16 has f32's range
        (void)convert(t);
    }
    DeviceMemory mem;
    const size_t bytes = host.size() * 2;
    if (Status s = mem.allocate(bytes, what); !s) return s.error();
    if (Status s = cuda_status(cudaMemcpy(mem.get(), host.data(), bytes, cudaMemcpyHostToDevice),
                               "uploading " + what);
        !s)
        return s.error();
    DeviceMatrix m;
    m.data = mem.get();
    m.type = t;
    m.rows = static_cast<int>(rows);
    m.cols = cols;
    memory_.push_back(std::move(mem));
    this->bytes += static_cast<int64_t>(bytes);
    return m;
}

Result<const float*> DeviceWeights::upload_vector(const std::vector<const Vector*>& parts,
                                                  const std::string& what) {
    std::vector<float> host;
    for (const Vector* v : parts)
        if (v->data) host.insert(host.end(), v->data, v->data + v->size);
    if (host.empty()) return static_cast<const float*>(nullptr);
    DeviceMemory mem;
    const size_t bytes = host.size() * sizeof(float);
    if (Status s = mem.allocate(bytes, what); !s) return s.error();
    if (Status s = cuda_status(cudaMemcpy(mem.get(), host.data(), bytes, cudaMemcpyHostToDevice),
                               "uploading " + what);
        !s)
        return s.error();
    const float* p = mem.as<const float>();
    memory_.push_back(std::move(mem));
    this->bytes += static_cast<int64_t>(bytes);
    return p;
}

Status DeviceWeights::upload(const ModelConfig& config, const ModelWeights& weights,
                             CudaWeightType type, ThreadPool& pool) {
    layers.assign(static_cast<size_t>(config.n_layers), {});
    for (int l = 0; l < config.n_layers; ++l) {
        const LayerWeights& w = weights.layers[static_cast<size_t>(l)];
        DeviceLayer& d = layers[static_cast<size_t>(l)];
        const std::string layer = "layer " + std::to_string(l) + " ";
        auto vec = [&](const std::vector<const Vector*>& parts, const char* name,
                       const float*& out) -> Status {
            auto r = upload_vector(parts, layer + name);
            if (!r) return r.error();
            out = r.value();
            return {};
        };
        auto mat = [&](const std::vector<const Matrix*>& parts, const char* name,
                       DeviceMatrix& out) -> Status {
            auto r = upload_stacked(parts, type, pool, layer + name);
            if (!r) return r.error();
            out = r.value();
            return {};
        };
        if (Status s = vec({&w.attn_norm}, "attention norm", d.attn_norm); !s) return s;
        if (Status s = mat({&w.wq, &w.wk, &w.wv}, "Q/K/V projections", d.qkv); !s) return s;
        if (w.bq.data || w.bk.data || w.bv.data) {
            if (!w.bq.data || !w.bk.data || !w.bv.data)
                return Error{layer + "has biases on some of Q, K and V but not all"};
            if (Status s = vec({&w.bq, &w.bk, &w.bv}, "Q/K/V biases", d.qkv_bias); !s) return s;
        }
        if (Status s = mat({&w.wo}, "output projection", d.wo); !s) return s;
        if (Status s = vec({&w.ffn_norm}, "MLP norm", d.ffn_norm); !s) return s;
        if (Status s = mat({&w.w_gate, &w.w_up}, "gate/up projections", d.gate_up); !s) return s;
        if (Status s = mat({&w.w_down}, "down projection", d.down); !s) return s;
    }
    auto norm = upload_vector({&weights.output_norm}, "output norm");
    if (!norm) return norm.error();
    output_norm = norm.value();
    auto out = upload_stacked({&weights.output}, type, pool, "output (classifier) matrix");
    if (!out) return out.error();
    output = out.value();
    return {};
}

}  // namespace kvscope::gpu
