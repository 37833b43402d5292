#pragma once
// A zero-filled array whose memory is committed page by page as it is first written: an
// anonymous private mapping reserved with MAP_NORESERVE. The KV cache is sized for a whole
// context (a million tokens under --ctx-size 1048576: 3 GiB for the bundled model, 6 GB of a
// 1B model's 128k), but a run only touches the blocks it fills; zero-filled vectors made every
// run pay for all of it up front (3.1 GB and seconds to generate four tokens). Pages never
// written read as zeros and cost nothing. Whether the whole array could fit the machine is the
// caller's question (machine_memory.h), asked before a pool that large is made. Blocks given
// back are released again (release()), so what a long run holds follows the blocks it holds,
// not every block it ever touched.

#include <cstddef>
#include <utility>

namespace kvscope {

// The untyped mapping under OnDemandArray.
class OnDemandBytes {
  public:
    OnDemandBytes() = default;
    explicit OnDemandBytes(size_t bytes);  // throws std::bad_alloc when it cannot be reserved
    ~OnDemandBytes();
    OnDemandBytes(OnDemandBytes&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    OnDemandBytes& operator=(OnDemandBytes&& o) noexcept {
        std::swap(data_, o.data_);
        std::swap(bytes_, o.bytes_);
        return *this;
    }
    OnDemandBytes(const OnDemandBytes&) = delete;
    OnDemandBytes& operator=(const OnDemandBytes&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    // Gives the whole pages inside [offset, offset + count) back to the system: they read as
    // zeros again and cost nothing until written.
    void release(size_t offset, size_t count);

  private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

template <class T>
class OnDemandArray {
  public:
    OnDemandArray() = default;
    explicit OnDemandArray(size_t count) : bytes_(count * sizeof(T)), size_(count) {}

    T* data() { return static_cast<T*>(bytes_.data()); }
    const T* data() const { return static_cast<const T*>(bytes_.data()); }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T& operator[](size_t i) { return data()[i]; }
    const T& operator[](size_t i) const { return data()[i]; }
    // Elements [first, first + count) read as zeros again; only their whole pages are released.
    void release(size_t first, size_t count) {
        bytes_.release(first * sizeof(T), count * sizeof(T));
    }

  private:
    OnDemandBytes bytes_;
    size_t size_ = 0;
};

}  // namespace kvscope
