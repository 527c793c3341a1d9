// rdma_pubsub.hpp: a header-only C++17 wrapper of the C API (rdma_pubsub.h).
//
// - RAII: `node`, `publisher`, `subscription`, `loan` and `message` own their C handle and
//   destroy it in their destructor; they move, they do not copy.
// - Views: `bytes` (read-only) and `mutable_bytes` are std::span-like (data, size, begin, end,
//   operator[]) over a loan's bytes in the ring and over a borrowed message in the READ buffer.
// - Errors are exceptions (`rdma_pubsub::error`, with the status and the library's detail),
//   not expected-like results. Why: constructors acquire the handles (a node, a publisher)
//   and a constructor has no result to return, so RAII and exceptions go together; and the
//   failures that remain are rare (a refused credential, a closed stream, a fabric error) and
//   end what the caller was doing. What is common is not an error: a receive that finds
//   nothing returns an empty std::optional, never throws. C++17 has no std::expected either.
//
// Thread safety is the C API's: a node and a publisher may be used by several threads at
// once; a subscription by one at a time; a loan on the thread that made it.
#ifndef RDMA_PUBSUB_HPP
#define RDMA_PUBSUB_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "rdma_pubsub.h"

namespace rdma_pubsub {

/// A failed call: its status and the library's detail.
class error : public std::runtime_error {
  public:
    error(rps_status status, const std::string &what)
        : std::runtime_error(std::string(rps_status_name(status)) + ": " + what), status_(status) {}
    /// The status the call returned.
    rps_status status() const noexcept { return status_; }

  private:
    rps_status status_;
};

namespace detail {
/// Throws for a failed status; returns the others (RPS_OK, RPS_EMPTY).
inline rps_status check(rps_status status) {
    if (status != RPS_OK && status != RPS_EMPTY) throw error(status, rps_last_error());
    return status;
}
/// A timeout in milliseconds for the C API (saturating).
inline uint64_t millis(std::chrono::milliseconds timeout) {
    return timeout.count() < 0 ? 0 : static_cast<uint64_t>(timeout.count());
}
}  // namespace detail

/// Read-only bytes: a std::span<const std::byte>-like view.
class bytes {
  public:
    bytes() = default;
    bytes(const uint8_t *data, std::size_t size) : data_(data), size_(size) {}
    const uint8_t *data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    const uint8_t *begin() const noexcept { return data_; }
    const uint8_t *end() const noexcept { return data_ + size_; }
    uint8_t operator[](std::size_t i) const noexcept { return data_[i]; }
    /// The bytes as characters (not NUL-terminated).
    std::string_view as_string_view() const noexcept { return {reinterpret_cast<const char *>(data_), size_}; }

  private:
    const uint8_t *data_ = nullptr;
    std::size_t size_ = 0;
};

/// Writable bytes: a std::span<std::byte>-like view.
class mutable_bytes {
  public:
    mutable_bytes(uint8_t *data, std::size_t size) : data_(data), size_(size) {}
    uint8_t *data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    uint8_t *begin() const noexcept { return data_; }
    uint8_t *end() const noexcept { return data_ + size_; }
    uint8_t &operator[](std::size_t i) const noexcept { return data_[i]; }

  private:
    uint8_t *data_;
    std::size_t size_;
};

/// A message's bytes and origin.
struct message_info {
    bytes data;
    uint64_t seq;
    uint64_t publisher_id;
    uint64_t publisher_epoch;
    /// Its topic (on a pattern subscription, the topic that matched), valid as long as `data`.
    std::string_view topic;
};

inline message_info info_of(const rps_message_view &view) {
    return {bytes(view.data, view.len), view.seq, view.publisher_id, view.publisher_epoch,
            std::string_view(view.topic, view.topic_len)};
}

/// Options of a node, with the library's defaults (`rps_node_options_init`).
struct node_options : rps_node_options {
    node_options() { detail::check(rps_node_options_init(this)); }
};
/// Options of a publisher, with the library's defaults.
struct publisher_options : rps_publisher_options {
    publisher_options() { detail::check(rps_publisher_options_init(this)); }
};
/// Options of a subscription, with the library's defaults.
struct subscriber_options : rps_subscriber_options {
    subscriber_options() { detail::check(rps_subscriber_options_init(this)); }
};

/// A node (see rps_node).
class node {
  public:
    explicit node(const node_options &options = node_options()) { detail::check(rps_node_create(&options, &handle_)); }
    node(node &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    node &operator=(node &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    node(const node &) = delete;
    node &operator=(const node &) = delete;
    ~node() { rps_node_destroy(&handle_); }

    /// The listening address, "ip:port".
    std::string local_addr() const {
        char buf[64];
        detail::check(rps_node_local_addr(handle_, buf, sizeof buf));
        return buf;
    }
    rps_node *get() const noexcept { return handle_; }

  private:
    rps_node *handle_ = nullptr;
};

/// A message written in place in the publisher's ring; `send` it, or let it go unsent.
class loan {
  public:
    loan(rps_loan *handle, uint8_t *data, std::size_t size) : handle_(handle), bytes_(data, size) {}
    loan(loan &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)), bytes_(other.bytes_) {}
    loan(const loan &) = delete;
    loan &operator=(const loan &) = delete;
    loan &operator=(loan &&) = delete;
    /// Dropped unsent: nothing is published.
    ~loan() { rps_loan_drop(&handle_); }

    /// The message's bytes, zeroed, to fill.
    mutable_bytes data() const noexcept { return bytes_; }
    /// Publishes it; returns its sequence number.
    uint64_t send() {
        uint64_t seq = 0;
        detail::check(rps_loan_send(&handle_, &seq));
        return seq;
    }

  private:
    rps_loan *handle_;
    mutable_bytes bytes_;
};

/// A publisher held by this thread, publishing without a lock per message (see rps_exclusive);
/// its publisher is shared again when it is destroyed.
class exclusive_publisher {
  public:
    explicit exclusive_publisher(rps_exclusive *handle) : handle_(handle) {}
    exclusive_publisher(exclusive_publisher &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    exclusive_publisher(const exclusive_publisher &) = delete;
    exclusive_publisher &operator=(const exclusive_publisher &) = delete;
    exclusive_publisher &operator=(exclusive_publisher &&) = delete;
    ~exclusive_publisher() { rps_exclusive_end(&handle_); }

    /// Publishes a copy of `data`; returns its sequence number.
    uint64_t publish(bytes data) {
        uint64_t seq = 0;
        detail::check(rps_exclusive_publish(handle_, data.data(), data.size(), &seq));
        return seq;
    }
    uint64_t publish(std::string_view text) {
        return publish(bytes(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
    }

  private:
    rps_exclusive *handle_;
};

/// A publisher of one topic (see rps_publisher).
class publisher {
  public:
    publisher(const node &owner, const std::string &topic, const publisher_options &options = publisher_options()) {
        detail::check(rps_publisher_create(owner.get(), topic.c_str(), &options, &handle_));
    }
    publisher(publisher &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    publisher(const publisher &) = delete;
    publisher &operator=(const publisher &) = delete;
    publisher &operator=(publisher &&) = delete;
    ~publisher() { rps_publisher_destroy(&handle_); }

    /// Publishes a copy of `data`; returns its sequence number.
    uint64_t publish(bytes data) {
        uint64_t seq = 0;
        detail::check(rps_publisher_publish(handle_, data.data(), data.size(), &seq));
        return seq;
    }
    uint64_t publish(std::string_view text) {
        return publish(bytes(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
    }
    /// Holds the publisher on this thread until the handle is destroyed: its `publish` takes
    /// no lock, and every other call on this publisher throws `RPS_EXCLUSIVE_HELD` meanwhile.
    exclusive_publisher exclusive() {
        rps_exclusive *handle = nullptr;
        detail::check(rps_publisher_exclusive(handle_, &handle));
        return exclusive_publisher(handle);
    }
    /// Lends `size` bytes of the ring for a message written in place.
    loan borrow(std::size_t size) {
        rps_loan *handle = nullptr;
        uint8_t *data = nullptr;
        detail::check(rps_publisher_loan(handle_, size, &handle, &data));
        return loan(handle, data, size);
    }
    /// Waits until at least `n` subscribers are connected; throws on timeout.
    std::size_t wait_for_subscribers(std::size_t n, std::chrono::milliseconds timeout) {
        std::size_t count = 0;
        detail::check(rps_publisher_wait_for_subscribers(handle_, n, detail::millis(timeout), &count));
        return count;
    }
    /// Waits until every subscriber consumed everything published; throws on timeout.
    void flush(std::chrono::milliseconds timeout) { detail::check(rps_publisher_flush(handle_, detail::millis(timeout))); }
    rps_publisher_counters counters() const {
        rps_publisher_counters out{};
        detail::check(rps_publisher_get_counters(handle_, &out));
        return out;
    }

  private:
    rps_publisher *handle_ = nullptr;
};

/// A subscription to one topic (see rps_subscription).
class subscription {
  public:
    /// A message borrowed from the READ buffer (zero copy), released when this goes.
    class borrowed {
      public:
        borrowed(rps_subscription *sub, const rps_message_view &view) : sub_(sub), info_(info_of(view)) {}
        borrowed(borrowed &&other) noexcept : sub_(std::exchange(other.sub_, nullptr)), info_(other.info_) {}
        borrowed(const borrowed &) = delete;
        borrowed &operator=(const borrowed &) = delete;
        borrowed &operator=(borrowed &&) = delete;
        ~borrowed() {
            if (sub_) rps_subscription_release(sub_);
        }
        const message_info &info() const noexcept { return info_; }
        bytes data() const noexcept { return info_.data; }
        uint64_t seq() const noexcept { return info_.seq; }

      private:
        rps_subscription *sub_;
        message_info info_;
    };

    subscription(const node &owner, const std::string &topic,
                 const subscriber_options &options = subscriber_options()) {
        detail::check(rps_subscription_create(owner.get(), topic.c_str(), &options, &handle_));
    }
    subscription(subscription &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    subscription(const subscription &) = delete;
    subscription &operator=(const subscription &) = delete;
    subscription &operator=(subscription &&) = delete;
    ~subscription() { rps_subscription_destroy(&handle_); }

    /// Connects to the publisher at `addr` ("ip:port") and waits for its answer.
    void connect(const std::string &addr, std::chrono::milliseconds timeout) {
        detail::check(rps_subscription_connect(handle_, addr.c_str(), detail::millis(timeout)));
    }
    /// The next message, borrowed, within `timeout` (0: without blocking); empty when none.
    std::optional<borrowed> receive(std::chrono::milliseconds timeout) {
        rps_message_view view;
        if (detail::check(rps_subscription_recv_ref(handle_, detail::millis(timeout), &view)) == RPS_EMPTY) {
            return std::nullopt;
        }
        return std::optional<borrowed>(std::in_place, handle_, view);
    }
    /// The next message, copied into a std::string, within `timeout`; empty when none.
    std::optional<std::string> receive_copy(std::chrono::milliseconds timeout) {
        auto m = receive(timeout);
        if (!m) return std::nullopt;
        return std::string(m->data().as_string_view());
    }
    /// The next event, if any.
    std::optional<rps_event> try_event() {
        rps_event event;
        if (detail::check(rps_subscription_try_event(handle_, &event)) == RPS_EMPTY) return std::nullopt;
        return event;
    }
    /// The descriptor an event loop waits on (see rps_subscription_ready_fd).
    int ready_fd() const {
        int32_t fd = -1;
        detail::check(rps_subscription_ready_fd(handle_, &fd));
        return fd;
    }
    /// Arms the descriptor; true: something may be ready, receive again instead of waiting.
    bool prepare_wait() {
        bool may_be_ready = false;
        detail::check(rps_subscription_prepare_wait(handle_, &may_be_ready));
        return may_be_ready;
    }
    rps_subscription_counters counters() const {
        rps_subscription_counters out{};
        detail::check(rps_subscription_get_counters(handle_, &out));
        return out;
    }

  private:
    rps_subscription *handle_ = nullptr;
};

}  // namespace rdma_pubsub

#endif  // RDMA_PUBSUB_HPP
