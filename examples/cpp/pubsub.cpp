// pubsub: the C++ wrapper end to end in one process: two nodes, a publisher on one, a
// subscription on the other connected by address; messages published by copy, by a loan
// written in place and through the publisher held by this thread, received borrowed (zero
// copy) and copied; a wrong credential's exception.
//
//   c++ -std=c++17 pubsub.cpp $(pkg-config --cflags --libs rdma_pubsub) -o pubsub
#include <chrono>
#include <cstring>
#include <iostream>

#include <rdma_pubsub.hpp>

using namespace std::chrono_literals;
namespace rps = rdma_pubsub;

static rps::node_options loopback() {
    rps::node_options options;
    options.fabric = RPS_FABRIC_SOFT;
    options.bind = "127.0.0.1:0";
    options.discovery = false;
    return options;
}

int main() {
    try {
        rps::node a(loopback()), b(loopback());
        rps::publisher pub(a, "cpp-example");
        rps::subscriber_options from_start;
        from_start.start = RPS_START_EARLIEST;
        rps::subscription sub(b, "cpp-example", from_start);
        sub.connect(a.local_addr(), 10s);

        pub.publish("copied in");
        {
            rps::loan loan = pub.borrow(14);
            std::memcpy(loan.data().data(), "written inline", 14);
            loan.send();
        }
        {
            rps::loan unsent = pub.borrow(4);  // dropped unsent: nothing published
        }
        auto first = sub.receive_copy(10s);
        auto second = sub.receive(10s);
        if (!first || *first != "copied in" || !second || second->data().as_string_view() != "written inline" ||
            second->seq() != 2) {
            std::cerr << "pubsub: unexpected messages\n";
            return 1;
        }
        std::cout << "1: " << *first << "\n2: " << second->data().as_string_view() << "\n";
        second.reset();  // releases the borrowed message
        if (sub.receive(100ms)) {
            std::cerr << "pubsub: the dropped loan was published\n";
            return 1;
        }
        {
            // A run of messages from this thread: no lock per message.
            rps::exclusive_publisher held = pub.exclusive();
            for (int i = 0; i < 1000; i++) held.publish("held");
        }
        for (uint64_t seq = 3; seq <= 1002; seq++) {
            auto m = sub.receive(10s);
            if (!m || m->seq() != seq || m->data().as_string_view() != "held") {
                std::cerr << "pubsub: the held publisher's message " << seq << " did not arrive\n";
                return 1;
            }
        }

        rps::publisher_options guarded;
        const char *secret = "a topic credential of 32 bytes!!";
        guarded.credential = reinterpret_cast<const uint8_t *>(secret);
        guarded.credential_len = std::strlen(secret);
        rps::publisher locked(a, "cpp-locked", guarded);
        rps::subscription intruder(b, "cpp-locked");
        try {
            intruder.connect(a.local_addr(), 10s);
            std::cerr << "pubsub: a subscription without the credential was accepted\n";
            return 1;
        } catch (const rps::error &e) {
            if (e.status() != RPS_UNAUTHORIZED) throw;
            std::cout << "refused: " << e.what() << "\n";
        }
        std::cout << "published " << pub.counters().published << ", delivered " << sub.counters().delivered << "\n";
        return 0;
    } catch (const rps::error &e) {
        std::cerr << "pubsub: " << e.what() << "\n";
        return 1;
    }
}
