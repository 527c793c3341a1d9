/*
 * pub: publishes COUNT messages (default 10) on the topic "example", zero copy (a loan
 * written in place, then sent). Prints its node's address on the first line of stdout for
 * `sub ADDR`, waits up to 10 s for a subscriber, and up to 10 s for it to read everything.
 * Discovery is off: subscribers connect by address.
 *
 *   cc pub.c $(pkg-config --cflags --libs rdma_pubsub) -o pub
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma_pubsub.h>

static int fail(const char *what, rps_status status) {
    fprintf(stderr, "pub: %s: %s: %s\n", what, rps_status_name(status), rps_last_error());
    return 1;
}

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 10;
    rps_node_options options;
    rps_node_options_init(&options);
    options.fabric = RPS_FABRIC_SOFT;
    options.bind = "127.0.0.1:0";
    options.discovery = false;
    rps_node *node = NULL;
    rps_status s = rps_node_create(&options, &node);
    if (s != RPS_OK) return fail("node", s);
    rps_publisher *pub = NULL;
    if ((s = rps_publisher_create(node, "example", NULL, &pub)) != RPS_OK) return fail("publisher", s);

    char addr[64];
    rps_node_local_addr(node, addr, sizeof addr);
    printf("%s\n", addr);
    fflush(stdout);
    if ((s = rps_publisher_wait_for_subscribers(pub, 1, 10000, NULL)) != RPS_OK) return fail("subscriber", s);

    for (long i = 0; i < count; i++) {
        char text[32];
        int len = snprintf(text, sizeof text, "message %ld", i);
        rps_loan *loan = NULL;
        uint8_t *data = NULL;
        if ((s = rps_publisher_loan(pub, (size_t)len, &loan, &data)) != RPS_OK) return fail("loan", s);
        memcpy(data, text, (size_t)len);
        if ((s = rps_loan_send(&loan, NULL)) != RPS_OK) return fail("send", s);
    }
    if ((s = rps_publisher_flush(pub, 10000)) != RPS_OK) return fail("flush", s);
    rps_publisher_counters counters;
    rps_publisher_get_counters(pub, &counters);
    fprintf(stderr, "pub: %llu messages published\n", (unsigned long long)counters.published);
    rps_publisher_destroy(&pub);
    rps_node_destroy(&node);
    return 0;
}
