/*
 * rate: the throughput run of `pubsub-demo bench` (one size, one subscriber thread, policy
 * BLOCK), written against the C API, to compare the two in one run (scripts/capi-bench.sh).
 *
 * As the demo: two soft nodes on 127.0.0.1 without discovery, a ring of 1 MiB (what the demo
 * gives messages of up to 64 KiB), a subscription from the earliest message connected by
 * address; the publisher publishes SIZE-byte messages (copied in, `rps_publisher_publish`) as
 * fast as the policy lets it, up to MESSAGES or 60 % of SECONDS (the clock read every 1024
 * messages), the last one marked; the subscriber thread receives with `recv_ref` (zero copy),
 * checks each message's sequence number and header, and publishes its progress in an atomic;
 * the rate is messages / time until the subscriber has the last one.
 *
 * Prints one line: `size=64 messages=N msgs_per_sec=R publish_msgs_per_sec=P pub_cpu_us=C
 * sub_cpu_us=S lost=0 damaged=0`: the CPU times per message are the demo's `pub_cpu_us` (the
 * publishing thread's) and `sub_cpu_us` (the receiving thread's, first message to last), less
 * sensitive than rates to other work on the machine.
 *
 *   rate [SIZE [MESSAGES [SECONDS]]]      (defaults 64 200000 2)
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma_pubsub.h>

#define END UINT64_MAX

static _Atomic uint64_t progress;
static _Atomic int failed;
static uint64_t lost, damaged;

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The receiving thread's CPU time from its first message to the last, and the messages. */
static double sub_cpu;
static uint64_t sub_msgs;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what, rps_status s) {
    fprintf(stderr, "rate: %s: %s: %s\n", what, rps_status_name(s), rps_last_error());
    exit(1);
}

struct sub_args {
    rps_subscription *sub;
    size_t size;
};

/* Receives until the marked last message (or 10 s without any). */
static void *receive(void *arg) {
    struct sub_args *a = arg;
    uint64_t expected = 1;
    double idle_since = 0, cpu0 = -1;
    for (;;) {
        rps_message_view v;
        rps_status s = rps_subscription_recv_ref(a->sub, 100, &v);
        if (s == RPS_EMPTY) {
            double t = now_s();
            if (idle_since == 0) idle_since = t;
            if (t - idle_since > 10) break;
            continue;
        }
        if (s != RPS_OK) die("receive", s);
        idle_since = 0;
        if (cpu0 < 0) cpu0 = thread_cpu_s();
        else sub_msgs++;
        uint64_t seq, mark;
        if (v.len != a->size) {
            damaged++;
        } else {
            memcpy(&seq, v.data, 8);
            memcpy(&mark, v.data + 8, 8);
            if (seq != v.seq) damaged++;
        }
        if (v.seq > expected) lost += v.seq - expected;
        expected = v.seq + 1;
        mark = v.len == a->size ? mark : 0;
        rps_subscription_release(a->sub);
        if ((v.seq & 1023) == 0 || mark == END) atomic_store_explicit(&progress, v.seq, memory_order_release);
        if (mark == END) {
            sub_cpu = thread_cpu_s() - cpu0;
            return NULL;
        }
    }
    atomic_store(&failed, 1);
    return NULL;
}

static rps_node *make_node(void) {
    rps_node_options o;
    rps_node_options_init(&o);
    o.fabric = RPS_FABRIC_SOFT;
    o.bind = "127.0.0.1:0";
    o.discovery = false;
    rps_node *n = NULL;
    rps_status s = rps_node_create(&o, &n);
    if (s != RPS_OK) die("node", s);
    return n;
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    uint64_t most = argc > 2 ? strtoull(argv[2], NULL, 10) : 200000;
    double seconds = argc > 3 ? atof(argv[3]) : 2.0;
    if (size < 16) size = 16;
    rps_node *pub_node = make_node(), *sub_node = make_node();
    rps_publisher_options po;
    rps_publisher_options_init(&po);
    po.ring_capacity = 1 << 20;
    rps_publisher *pub = NULL;
    rps_status s = rps_publisher_create(pub_node, "bench-c", &po, &pub);
    if (s != RPS_OK) die("publisher", s);
    rps_subscriber_options so;
    rps_subscriber_options_init(&so);
    so.start = RPS_START_EARLIEST;
    rps_subscription *sub = NULL;
    if ((s = rps_subscription_create(sub_node, "bench-c", &so, &sub)) != RPS_OK) die("subscribe", s);
    char addr[64];
    rps_node_local_addr(pub_node, addr, sizeof addr);
    if ((s = rps_subscription_connect(sub, addr, 10000)) != RPS_OK) die("connect", s);
    struct sub_args a = {sub, size};
    pthread_t thread;
    pthread_create(&thread, NULL, receive, &a);

    uint8_t *buf = calloc(1, size);
    double start = now_s(), throughput_end = start + seconds * 0.6, cpu0 = thread_cpu_s();
    uint64_t seq = 0;
    for (;;) {
        seq++;
        int last = seq >= most || ((seq & 1023) == 0 && now_s() >= throughput_end);
        uint64_t mark = last ? END : 0;
        memcpy(buf, &seq, 8);
        memcpy(buf + 8, &mark, 8);
        if ((s = rps_publisher_publish(pub, buf, size, NULL)) != RPS_OK) die("publish", s);
        if (last) break;
    }
    double published_at = now_s(), pub_cpu = thread_cpu_s() - cpu0;
    while (atomic_load_explicit(&progress, memory_order_acquire) < seq) {
        if (atomic_load(&failed) || now_s() - published_at > 30) {
            fprintf(stderr, "rate: the subscriber did not get every message\n");
            return 1;
        }
        sched_yield();
    }
    double secs = now_s() - start;
    pthread_join(thread, NULL);
    printf("size=%zu messages=%" PRIu64 " msgs_per_sec=%.0f publish_msgs_per_sec=%.0f pub_cpu_us=%.3f"
           " sub_cpu_us=%.3f lost=%" PRIu64 " damaged=%" PRIu64 "\n",
           size, seq, (double)seq / secs, (double)seq / (published_at - start), pub_cpu * 1e6 / (double)seq,
           sub_msgs ? sub_cpu * 1e6 / (double)sub_msgs : 0.0, lost, damaged);
    free(buf);
    rps_subscription_destroy(&sub);
    rps_publisher_destroy(&pub);
    rps_node_destroy(&sub_node);
    rps_node_destroy(&pub_node);
    return lost || damaged ? 1 : 0;
}
