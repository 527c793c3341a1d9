/*
 * sub ADDR [COUNT]: subscribes to the topic "example" of the publisher at ADDR ("ip:port",
 * what `pub` prints) and prints COUNT messages (default 10), driven by poll(2) on the
 * subscription's readiness descriptor as an event loop would: receive until RPS_EMPTY, take
 * the events, prepare_wait, then wait for the descriptor (10 s at most).
 *
 *   cc sub.c $(pkg-config --cflags --libs rdma_pubsub) -o sub
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include <rdma_pubsub.h>

static int fail(const char *what, rps_status status) {
    fprintf(stderr, "sub: %s: %s: %s\n", what, rps_status_name(status), rps_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: sub ADDR [COUNT]\n");
        return 2;
    }
    long count = argc > 2 ? atol(argv[2]) : 10;
    rps_node_options options;
    rps_node_options_init(&options);
    options.fabric = RPS_FABRIC_SOFT;
    options.bind = "127.0.0.1:0";
    options.discovery = false;
    rps_node *node = NULL;
    rps_status s = rps_node_create(&options, &node);
    if (s != RPS_OK) return fail("node", s);
    rps_subscriber_options sub_options;
    rps_subscriber_options_init(&sub_options);
    sub_options.start = RPS_START_EARLIEST;
    rps_subscription *sub = NULL;
    if ((s = rps_subscription_create(node, "example", &sub_options, &sub)) != RPS_OK) return fail("subscribe", s);
    if ((s = rps_subscription_connect(sub, argv[1], 10000)) != RPS_OK) return fail("connect", s);
    int fd = -1;
    if ((s = rps_subscription_ready_fd(sub, &fd)) != RPS_OK) return fail("ready_fd", s);

    long received = 0;
    while (received < count) {
        rps_message_view view;
        s = rps_subscription_recv_ref(sub, 0, &view);
        if (s == RPS_OK) {
            printf("%llu: %.*s\n", (unsigned long long)view.seq, (int)view.len, (const char *)view.data);
            rps_subscription_release(sub);
            received++;
            continue;
        }
        if (s != RPS_EMPTY) return fail("receive", s);
        rps_event event;
        while (rps_subscription_try_event(sub, &event) == RPS_OK) fprintf(stderr, "sub: event %s\n", event.detail);
        bool may_be_ready = false;
        if ((s = rps_subscription_prepare_wait(sub, &may_be_ready)) != RPS_OK) return fail("prepare_wait", s);
        if (!may_be_ready) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            if (poll(&pfd, 1, 10000) != 1) {
                fprintf(stderr, "sub: nothing for 10 s\n");
                return 1;
            }
        }
    }
    rps_subscription_destroy(&sub);
    rps_node_destroy(&node);
    return 0;
}
