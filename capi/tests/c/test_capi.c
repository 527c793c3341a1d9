/*
 * The C tests of librdma_pubsub: a small runner, built by scripts/capi-tests.sh against the
 * installed library. `test_capi` runs every test; `test_capi NAME...` the ones named;
 * `test_capi cycles N` makes and destroys a node, a publisher and a subscription N times (run
 * under valgrind for leaks). Soft fabric on loopback, discovery off; every wait has a
 * timeout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma_pubsub.h>

#define WAIT_MS 10000

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (last error: %s)\n", rps_last_error());                     \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define OK(call) CHECK((call) == RPS_OK, "%s", #call)

static const char *self_path;

/* A soft node on loopback without discovery. */
static rps_node *make_node(void) {
    rps_node_options options;
    OK(rps_node_options_init(&options));
    options.fabric = RPS_FABRIC_SOFT;
    options.bind = "127.0.0.1:0";
    options.discovery = false;
    rps_node *node = NULL;
    OK(rps_node_create(&options, &node));
    CHECK(node != NULL, "a node");
    return node;
}

static void local_addr(const rps_node *node, char *buf, size_t cap) {
    OK(rps_node_local_addr(node, buf, cap));
}

/* A subscription to `topic` on `node`, connected to the publisher at `addr`. */
static rps_subscription *subscribe(rps_node *node, const char *topic, const char *addr) {
    rps_subscriber_options options;
    OK(rps_subscriber_options_init(&options));
    options.start = RPS_START_EARLIEST;
    rps_subscription *sub = NULL;
    OK(rps_subscription_create(node, topic, &options, &sub));
    OK(rps_subscription_connect(sub, addr, WAIT_MS));
    return sub;
}

/* A pattern reads the publishers of every topic it includes, found by discovery (a domain of
 * this process alone) or listed by the node it connects to, and no other; without discovery
 * and without a node to connect to it is refused. */
static void pattern(void) {
    rps_node *plain = make_node();
    rps_subscription *sub = NULL;
    CHECK(rps_subscription_create(plain, "c-pattern/*", NULL, &sub) == RPS_INVALID_OPTION && sub == NULL,
          "a pattern without discovery: %s", rps_last_error());
    /* Without discovery, connected to the publishers' node: its matching topic only. */
    rps_node *served = make_node();
    rps_publisher *listed = NULL, *unlisted = NULL;
    OK(rps_publisher_create(served, "c-listed/x", NULL, &listed));
    OK(rps_publisher_create(served, "c-unlisted", NULL, &unlisted));
    char served_addr[64];
    local_addr(served, served_addr, sizeof served_addr);
    rps_subscriber_options by_addr;
    OK(rps_subscriber_options_init(&by_addr));
    by_addr.start = RPS_START_EARLIEST;
    by_addr.connect = served_addr;
    OK(rps_subscription_create(plain, "c-listed/*", &by_addr, &sub));
    OK(rps_subscription_connect(sub, served_addr, WAIT_MS));
    OK(rps_publisher_publish(unlisted, (const uint8_t *)"other", 5, NULL));
    OK(rps_publisher_publish(listed, (const uint8_t *)"listed", 6, NULL));
    rps_message_view listed_view;
    OK(rps_subscription_recv_ref(sub, WAIT_MS, &listed_view));
    CHECK(listed_view.len == 6 && listed_view.topic_len == 10 && memcmp(listed_view.topic, "c-listed/x", 10) == 0,
          "the listed topic: %.*s", (int)listed_view.topic_len, listed_view.topic);
    OK(rps_subscription_release(sub));
    CHECK(rps_subscription_recv_ref(sub, 0, &listed_view) == RPS_EMPTY, "none of the unlisted topic");
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&listed));
    OK(rps_publisher_destroy(&unlisted));
    rps_node_destroy(&served);
    rps_node_destroy(&plain);

    rps_node_options options;
    OK(rps_node_options_init(&options));
    options.fabric = RPS_FABRIC_SOFT;
    options.bind = "127.0.0.1:0";
    options.domain = (uint16_t)(1000 + getpid() % 1000);
    rps_node *a = NULL, *b = NULL;
    OK(rps_node_create(&options, &a));
    OK(rps_node_create(&options, &b));
    rps_publisher *match = NULL, *other = NULL;
    OK(rps_publisher_create(a, "c-pattern/x", NULL, &match));
    OK(rps_publisher_create(a, "c-pattern-other", NULL, &other));
    rps_subscriber_options so;
    OK(rps_subscriber_options_init(&so));
    so.start = RPS_START_EARLIEST;
    OK(rps_subscription_create(b, "c-pattern/*", &so, &sub));
    OK(rps_publisher_publish(other, (const uint8_t *)"other", 5, NULL));
    OK(rps_publisher_publish(match, (const uint8_t *)"matched", 7, NULL));
    rps_message_view view;
    OK(rps_subscription_recv_ref(sub, WAIT_MS, &view));
    CHECK(view.len == 7 && memcmp(view.data, "matched", 7) == 0, "the message of the matching topic");
    CHECK(view.topic_len == 11 && memcmp(view.topic, "c-pattern/x", 11) == 0, "its topic: %.*s",
          (int)view.topic_len, view.topic);
    OK(rps_subscription_release(sub));
    /* The copying receives name the topic too. */
    OK(rps_publisher_publish(match, (const uint8_t *)"again", 5, NULL));
    uint8_t copy[16];
    OK(rps_subscription_recv_into(sub, WAIT_MS, copy, sizeof copy, &view));
    CHECK(view.len == 5 && view.topic_len == 11 && memcmp(view.topic, "c-pattern/x", 11) == 0,
          "recv_into's topic: %.*s", (int)view.topic_len, view.topic);
    OK(rps_publisher_publish(match, (const uint8_t *)"owned", 5, NULL));
    rps_message *owned = NULL;
    OK(rps_subscription_recv(sub, WAIT_MS, &owned));
    OK(rps_message_get_view(owned, &view));
    CHECK(view.len == 5 && view.topic_len == 11 && memcmp(view.topic, "c-pattern/x", 11) == 0,
          "an owned message's topic: %.*s", (int)view.topic_len, view.topic);
    rps_message_destroy(&owned);

    /* With max_feeds 1 and two matching publishers, one is read and the other is an event. */
    rps_publisher *second = NULL;
    OK(rps_publisher_create(a, "c-pattern/y", NULL, &second));
    rps_subscriber_options limited = so;
    limited.max_feeds = 1;
    rps_subscription *one = NULL;
    OK(rps_subscription_create(b, "c-pattern/*", &limited, &one));
    bool told = false;
    for (int i = 0; i < WAIT_MS / 20 && !told; i++) {
        if (rps_subscription_recv_ref(one, 20, &view) == RPS_OK) OK(rps_subscription_release(one));
        rps_event event;
        while (!told && rps_subscription_try_event(one, &event) == RPS_OK) {
            told = event.kind == RPS_EVENT_FEED_LIMIT && event.value == 1;
        }
    }
    CHECK(told, "an RPS_EVENT_FEED_LIMIT event naming the limit of 1");
    rps_subscription_destroy(&one);
    OK(rps_publisher_destroy(&second));
    CHECK(rps_subscription_recv_ref(sub, 0, &view) == RPS_EMPTY, "none of the other topic");
    rps_publisher_counters counters;
    OK(rps_publisher_get_counters(other, &counters));
    CHECK(counters.subscribers == 0, "the other topic has no subscriber");
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&match));
    OK(rps_publisher_destroy(&other));
    rps_node_destroy(&b);
    rps_node_destroy(&a);
}

static void round_trip(void) {
    rps_node *a = make_node(), *b = make_node();
    char addr[64];
    local_addr(a, addr, sizeof addr);
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(a, "c-round-trip", NULL, &pub));
    rps_subscription *sub = subscribe(b, "c-round-trip", addr);

    /* Copy in, copy out. */
    uint64_t seq = 0;
    OK(rps_publisher_publish(pub, (const uint8_t *)"hello", 5, &seq));
    CHECK(seq == 1, "seq %" PRIu64, seq);
    rps_message *msg = NULL;
    OK(rps_subscription_recv(sub, WAIT_MS, &msg));
    rps_message_view view;
    OK(rps_message_get_view(msg, &view));
    CHECK(view.len == 5 && memcmp(view.data, "hello", 5) == 0 && view.seq == 1, "the message");
    rps_message_destroy(&msg);
    CHECK(msg == NULL, "destroy sets the handle to NULL");

    /* Zero copy both ways: a loan written in place, a borrowed view. */
    rps_loan *loan = NULL;
    uint8_t *data = NULL;
    OK(rps_publisher_loan(pub, 8, &loan, &data));
    memcpy(data, "in place", 8);
    OK(rps_loan_send(&loan, &seq));
    CHECK(loan == NULL && seq == 2, "sent as 2");
    OK(rps_subscription_recv_ref(sub, WAIT_MS, &view));
    CHECK(view.len == 8 && memcmp(view.data, "in place", 8) == 0 && view.seq == 2, "the borrowed message");
    CHECK(rps_subscription_recv_ref(sub, 0, &view) == RPS_BORROW_OUTSTANDING, "one borrow at a time");
    OK(rps_subscription_release(sub));

    /* Into the caller's buffer: too small keeps the message for the next call. */
    OK(rps_publisher_publish(pub, (const uint8_t *)"0123456789", 10, NULL));
    uint8_t small[4], big[16];
    CHECK(rps_subscription_recv_into(sub, WAIT_MS, small, sizeof small, &view) == RPS_BUFFER_TOO_SMALL, "too small");
    CHECK(view.len == 10, "the length it needs: %zu", view.len);
    OK(rps_subscription_recv_into(sub, WAIT_MS, big, sizeof big, &view));
    CHECK(view.len == 10 && view.data == big && memcmp(big, "0123456789", 10) == 0 && view.seq == 3, "into the buffer");
    /* A kept message is lent by a borrowing receive too. */
    OK(rps_publisher_publish(pub, (const uint8_t *)"kept", 4, NULL));
    CHECK(rps_subscription_recv_into(sub, WAIT_MS, small, 2, &view) == RPS_BUFFER_TOO_SMALL, "too small");
    OK(rps_subscription_recv_ref(sub, WAIT_MS, &view));
    CHECK(view.len == 4 && memcmp(view.data, "kept", 4) == 0 && view.seq == 4, "the kept message, borrowed");
    OK(rps_subscription_release(sub));

    /* Nothing more: a non-blocking receive says so. */
    CHECK(rps_subscription_recv(sub, 0, &msg) == RPS_EMPTY && msg == NULL, "nothing more");

    /* The readiness descriptor wakes an event loop for the next message. */
    int fd = -1;
    OK(rps_subscription_ready_fd(sub, &fd));
    CHECK(fd >= 0, "a descriptor");
    OK(rps_publisher_publish(pub, (const uint8_t *)"woken", 5, NULL));
    rps_status status;
    rps_event event;
    for (;;) {
        status = rps_subscription_recv_into(sub, 0, big, sizeof big, &view);
        if (status == RPS_OK) break;
        CHECK(status == RPS_EMPTY, "%s", rps_status_name(status));
        while (rps_subscription_try_event(sub, &event) == RPS_OK) {}
        bool may_be_ready = false;
        OK(rps_subscription_prepare_wait(sub, &may_be_ready));
        if (!may_be_ready) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            CHECK(poll(&pfd, 1, WAIT_MS) == 1, "the descriptor is readable within %d ms", WAIT_MS);
        }
    }
    CHECK(view.len == 5 && memcmp(big, "woken", 5) == 0, "the message that woke the loop");

    rps_publisher_counters pc;
    rps_subscription_counters sc;
    OK(rps_publisher_get_counters(pub, &pc));
    OK(rps_subscription_get_counters(sub, &sc));
    CHECK(pc.published == 5 && sc.delivered == 5, "counters: %" PRIu64 " published, %" PRIu64 " delivered",
          pc.published, sc.delivered);

    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&b);
    rps_node_destroy(&a);
}

static void null_handles_and_destroying_twice(void) {
    /* Destroy functions take NULL, and a destroyed handle is NULL: destroying twice is once. */
    rps_node_destroy(NULL);
    rps_publisher_destroy(NULL);
    rps_subscription_destroy(NULL);
    rps_message_destroy(NULL);
    rps_loan_drop(NULL);
    rps_node *node = make_node();
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(node, "c-twice", NULL, &pub));
    rps_subscription *sub = NULL;
    OK(rps_subscription_create(node, "c-twice", NULL, &sub));
    rps_subscription_destroy(&sub);
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&pub));
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&node);
    rps_node_destroy(&node);
    CHECK(node == NULL && pub == NULL && sub == NULL, "every handle is NULL");

    /* Every call with a NULL handle or out-pointer fails cleanly, with a detail. */
    CHECK(rps_node_create(NULL, NULL) == RPS_INVALID_ARGUMENT, "NULL out");
    CHECK(strstr(rps_last_error(), "NULL") != NULL, "the detail names it: %s", rps_last_error());
    CHECK(rps_publisher_create(NULL, "t", NULL, &pub) == RPS_INVALID_ARGUMENT, "NULL node");
    CHECK(rps_publisher_publish(NULL, (const uint8_t *)"x", 1, NULL) == RPS_INVALID_ARGUMENT, "NULL publisher");
    CHECK(rps_subscription_recv(NULL, 0, NULL) == RPS_INVALID_ARGUMENT, "NULL subscription");
    CHECK(rps_subscription_release(NULL) == RPS_INVALID_ARGUMENT, "NULL subscription");
    CHECK(rps_loan_send(NULL, NULL) == RPS_INVALID_ARGUMENT, "NULL loan");
    CHECK(rps_node_options_init(NULL) == RPS_INVALID_ARGUMENT, "NULL options");
    CHECK(rps_message_get_view(NULL, NULL) == RPS_INVALID_ARGUMENT, "NULL message");
    node = make_node();
    CHECK(rps_publisher_create(node, NULL, NULL, &pub) == RPS_INVALID_ARGUMENT, "NULL topic");
    CHECK(rps_publisher_create(node, "bad topic\n", NULL, &pub) == RPS_INVALID_TOPIC, "a bad topic");
    rps_publisher_options po;
    OK(rps_publisher_options_init(&po));
    po.policy = 7;
    CHECK(rps_publisher_create(node, "t", &po, &pub) == RPS_INVALID_ARGUMENT, "a policy out of range");
    CHECK(strstr(rps_last_error(), "policy") != NULL, "named: %s", rps_last_error());
    rps_node_destroy(&node);
}

static void a_wrong_credential_is_refused(void) {
    rps_node *a = make_node(), *b = make_node();
    char addr[64];
    local_addr(a, addr, sizeof addr);
    const char *secret = "the topic's secret, 32 bytes long", *wrong = "not the topic's secret, 32 bytes";
    rps_publisher_options po;
    OK(rps_publisher_options_init(&po));
    po.credential = (const uint8_t *)secret;
    po.credential_len = strlen(secret);
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(a, "c-credential", &po, &pub));
    rps_subscriber_options so;
    OK(rps_subscriber_options_init(&so));
    so.credential = (const uint8_t *)wrong;
    so.credential_len = strlen(wrong);
    rps_subscription *sub = NULL;
    OK(rps_subscription_create(b, "c-credential", &so, &sub));
    rps_status status = rps_subscription_connect(sub, addr, WAIT_MS);
    CHECK(status == RPS_UNAUTHORIZED, "refused as unauthorized, got %s", rps_status_name(status));
    CHECK(strstr(rps_last_error(), "Unauthorized") != NULL && strstr(rps_last_error(), addr) != NULL,
          "the detail says why and who: %s", rps_last_error());
    rps_publisher_counters pc;
    OK(rps_publisher_get_counters(pub, &pc));
    CHECK(pc.rejected_unauthorized == 1, "counted by the publisher: %" PRIu64, pc.rejected_unauthorized);

    /* The right one is accepted. */
    rps_subscription *right = NULL;
    so.credential = (const uint8_t *)secret;
    so.credential_len = strlen(secret);
    OK(rps_subscription_create(b, "c-credential", &so, &right));
    OK(rps_subscription_connect(right, addr, WAIT_MS));
    rps_subscription_destroy(&right);
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&b);
    rps_node_destroy(&a);
}

static void a_loan_dropped_unsent_publishes_nothing(void) {
    rps_node *a = make_node(), *b = make_node();
    char addr[64];
    local_addr(a, addr, sizeof addr);
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(a, "c-loan-drop", NULL, &pub));
    rps_subscription *sub = subscribe(b, "c-loan-drop", addr);
    rps_loan *loan = NULL;
    uint8_t *data = NULL;
    OK(rps_publisher_loan(pub, 16, &loan, &data));
    memset(data, 'x', 16);
    CHECK(rps_publisher_destroy(&pub) == RPS_LOAN_OUTSTANDING && pub != NULL, "not destroyed under a loan");
    rps_loan_drop(&loan);
    CHECK(loan == NULL, "the loan is NULL");
    rps_loan_drop(&loan);
    uint64_t seq = 0;
    OK(rps_publisher_publish(pub, (const uint8_t *)"sent", 4, &seq));
    CHECK(seq == 1, "the dropped loan took no sequence number: %" PRIu64, seq);
    rps_message_view view;
    OK(rps_subscription_recv_ref(sub, WAIT_MS, &view));
    CHECK(view.seq == 1 && view.len == 4 && memcmp(view.data, "sent", 4) == 0, "only the sent message");
    OK(rps_subscription_release(sub));
    rps_message *msg = NULL;
    CHECK(rps_subscription_recv(sub, 200, &msg) == RPS_EMPTY, "nothing else");
    rps_publisher_counters pc;
    OK(rps_publisher_get_counters(pub, &pc));
    CHECK(pc.published == 1, "one published: %" PRIu64, pc.published);
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&b);
    rps_node_destroy(&a);
}

/* A publisher held by this thread publishes without a lock per message; meanwhile every other
 * call on it is refused (none waits for it), and it is shared again once the handle ends. */
static void an_exclusive_handle_holds_the_publisher_until_it_ends(void) {
    rps_node *a = make_node(), *b = make_node();
    char addr[64];
    local_addr(a, addr, sizeof addr);
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(a, "c-exclusive", NULL, &pub));
    rps_subscription *sub = subscribe(b, "c-exclusive", addr);
    rps_exclusive *held = NULL;
    CHECK(rps_publisher_exclusive(pub, NULL) == RPS_INVALID_ARGUMENT, "NULL out");
    CHECK(rps_publisher_exclusive(NULL, &held) == RPS_INVALID_ARGUMENT && held == NULL, "NULL publisher");
    OK(rps_publisher_exclusive(pub, &held));
    CHECK(held != NULL, "a handle");
    uint64_t seq = 0;
    for (uint64_t i = 1; i <= 1000; i++) {
        OK(rps_exclusive_publish(held, (const uint8_t *)&i, sizeof i, &seq));
        CHECK(seq == i, "sequence %" PRIu64 " for message %" PRIu64, seq, i);
    }
    rps_exclusive *second = NULL;
    CHECK(rps_publisher_exclusive(pub, &second) == RPS_EXCLUSIVE_HELD && second == NULL, "held once");
    CHECK(rps_publisher_publish(pub, (const uint8_t *)"x", 1, NULL) == RPS_EXCLUSIVE_HELD, "publish refused");
    rps_publisher_counters pc;
    CHECK(rps_publisher_get_counters(pub, &pc) == RPS_EXCLUSIVE_HELD, "counters refused");
    CHECK(rps_publisher_flush(pub, 0) == RPS_EXCLUSIVE_HELD, "flush refused");
    rps_loan *loan = NULL;
    uint8_t *data = NULL;
    CHECK(rps_publisher_loan(pub, 8, &loan, &data) == RPS_EXCLUSIVE_HELD && loan == NULL, "loan refused");
    CHECK(rps_publisher_destroy(&pub) == RPS_EXCLUSIVE_HELD && pub != NULL, "not destroyed while held");
    CHECK(strcmp(rps_status_name(RPS_EXCLUSIVE_HELD), "RPS_EXCLUSIVE_HELD") == 0, "its name");
    rps_exclusive_end(&held);
    CHECK(held == NULL, "ended");
    rps_exclusive_end(&held);
    rps_exclusive_end(NULL);
    CHECK(rps_exclusive_publish(NULL, (const uint8_t *)"x", 1, NULL) == RPS_INVALID_ARGUMENT, "NULL handle");
    OK(rps_publisher_publish(pub, (const uint8_t *)"shared again", 12, &seq));
    CHECK(seq == 1001, "after the held run: %" PRIu64, seq);
    /* Under a loan no handle is made (this thread would wait for itself). */
    OK(rps_publisher_loan(pub, 8, &loan, &data));
    CHECK(rps_publisher_exclusive(pub, &held) == RPS_LOAN_OUTSTANDING && held == NULL, "refused under a loan");
    rps_loan_drop(&loan);
    for (uint64_t i = 1; i <= 1001; i++) {
        rps_message_view view;
        OK(rps_subscription_recv_ref(sub, WAIT_MS, &view));
        CHECK(view.seq == i, "message %" PRIu64 " arrived as %" PRIu64, i, view.seq);
        if (i <= 1000) {
            uint64_t got;
            CHECK(view.len == sizeof got, "length of message %" PRIu64, i);
            memcpy(&got, view.data, sizeof got);
            CHECK(got == i, "content of message %" PRIu64, i);
        }
        OK(rps_subscription_release(sub));
    }
    OK(rps_publisher_get_counters(pub, &pc));
    CHECK(pc.published == 1001, "published: %" PRIu64, pc.published);
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&b);
    rps_node_destroy(&a);
}

/* The size and alignment of every public struct, as C sees it. */
struct layout {
    const char *name;
    size_t size, align;
};
#define LAYOUT(T) {#T, sizeof(T), alignof(T)}
static const struct layout C_LAYOUTS[] = {
    LAYOUT(rps_node_options),       LAYOUT(rps_publisher_options),  LAYOUT(rps_subscriber_options),
    LAYOUT(rps_message_view),       LAYOUT(rps_event),              LAYOUT(rps_publisher_counters),
    LAYOUT(rps_subscription_counters),
};

static void struct_layouts_match(void) {
    size_t n = rps_struct_count(), c_count = sizeof C_LAYOUTS / sizeof C_LAYOUTS[0];
    CHECK(n == c_count, "the library has %zu public structs, this test %zu", n, c_count);
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        size_t size = 0, align = 0;
        OK(rps_struct_layout_at(i, &name, &size, &align));
        const struct layout *c = NULL;
        for (size_t j = 0; j < c_count; j++)
            if (strcmp(C_LAYOUTS[j].name, name) == 0) c = &C_LAYOUTS[j];
        CHECK(c != NULL, "%s is checked", name);
        CHECK(c->size == size && c->align == align, "%s: C %zu/%zu, Rust %zu/%zu", name, c->size, c->align, size,
              align);
    }
    const char *name = NULL;
    size_t size, align;
    CHECK(rps_struct_layout_at(n, &name, &size, &align) == RPS_INVALID_ARGUMENT, "past the last");
}

#define THREADS 4
#define PER_THREAD 2000

struct worker {
    rps_publisher *pub;
    uint32_t id;
};

static void *publish_from_thread(void *arg) {
    struct worker *w = arg;
    for (uint32_t i = 0; i < PER_THREAD; i++) {
        uint8_t msg[8];
        memcpy(msg, &w->id, 4);
        memcpy(msg + 4, &i, 4);
        if (i % 2) {
            rps_loan *loan = NULL;
            uint8_t *data = NULL;
            if (rps_publisher_loan(w->pub, sizeof msg, &loan, &data) != RPS_OK) return "loan";
            memcpy(data, msg, sizeof msg);
            if (rps_loan_send(&loan, NULL) != RPS_OK) return "send";
        } else if (rps_publisher_publish(w->pub, msg, sizeof msg, NULL) != RPS_OK) {
            return "publish";
        }
    }
    return NULL;
}

static void a_publisher_shared_by_four_threads(void) {
    rps_node *a = make_node(), *b = make_node();
    char addr[64];
    local_addr(a, addr, sizeof addr);
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(a, "c-threads", NULL, &pub));
    rps_subscription *sub = subscribe(b, "c-threads", addr);
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (uint32_t t = 0; t < THREADS; t++) {
        workers[t] = (struct worker){pub, t};
        CHECK(pthread_create(&threads[t], NULL, publish_from_thread, &workers[t]) == 0, "thread");
    }
    uint32_t next[THREADS] = {0};
    uint64_t last_seq = 0;
    for (uint32_t n = 0; n < THREADS * PER_THREAD; n++) {
        rps_message_view view;
        OK(rps_subscription_recv_ref(sub, WAIT_MS, &view));
        CHECK(view.len == 8 && view.seq == last_seq + 1, "message %u: seq %" PRIu64, n, view.seq);
        last_seq = view.seq;
        uint32_t id, i;
        memcpy(&id, view.data, 4);
        memcpy(&i, (const uint8_t *)view.data + 4, 4);
        CHECK(id < THREADS && i == next[id], "thread %u's message %u in order (expected %u)", id, i, next[id]);
        next[id]++;
        OK(rps_subscription_release(sub));
    }
    for (int t = 0; t < THREADS; t++) {
        void *failed = NULL;
        pthread_join(threads[t], &failed);
        CHECK(failed == NULL, "thread %d: %s failed", t, (const char *)failed);
    }
    rps_subscription_destroy(&sub);
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&b);
    rps_node_destroy(&a);
}

/* The publisher process of `two_processes`: writes its address to `fd`, waits for one
 * subscriber, publishes 100 messages, waits until they are consumed. */
static int publisher_process(int fd) {
    rps_node *node = make_node();
    rps_publisher *pub = NULL;
    OK(rps_publisher_create(node, "c-two-processes", NULL, &pub));
    char addr[64];
    local_addr(node, addr, sizeof addr);
    CHECK(write(fd, addr, strlen(addr) + 1) == (ssize_t)strlen(addr) + 1, "write the address");
    close(fd);
    OK(rps_publisher_wait_for_subscribers(pub, 1, WAIT_MS, NULL));
    for (uint32_t i = 0; i < 100; i++) OK(rps_publisher_publish(pub, (const uint8_t *)&i, 4, NULL));
    OK(rps_publisher_flush(pub, WAIT_MS));
    OK(rps_publisher_destroy(&pub));
    rps_node_destroy(&node);
    return 0;
}

static void two_processes(void) {
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        close(fds[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", fds[1]);
        execl(self_path, self_path, "publisher-process", fd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char addr[64] = {0};
    size_t got = 0;
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    while (got == 0 || addr[got - 1] != '\0') {
        CHECK(poll(&pfd, 1, WAIT_MS) == 1, "the publisher process says its address");
        ssize_t n = read(fds[0], addr + got, sizeof addr - 1 - got);
        CHECK(n > 0, "read the address");
        got += (size_t)n;
    }
    close(fds[0]);
    rps_node *node = make_node();
    rps_subscription *sub = subscribe(node, "c-two-processes", addr);
    for (uint32_t i = 0; i < 100; i++) {
        uint32_t v = 0;
        rps_message_view view;
        OK(rps_subscription_recv_into(sub, WAIT_MS, (uint8_t *)&v, sizeof v, &view));
        CHECK(v == i && view.seq == i + 1, "message %u from the other process: %u", i, v);
    }
    /* Receiving goes on (acking what was read, which the publisher's flush waits for) until
     * the publisher process ends its stream: without discovery, the end of the last stream is
     * RPS_NOT_CONNECTED (RPS_CLOSED is only for a closed subscription or node). */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        rps_message *msg = NULL;
        rps_status s = rps_subscription_recv(sub, 100, &msg);
        if (s == RPS_NOT_CONNECTED) break;
        CHECK(s == RPS_EMPTY, "no more messages: %s", rps_status_name(s));
        clock_gettime(CLOCK_MONOTONIC, &now);
        CHECK(now.tv_sec - start.tv_sec < WAIT_MS / 1000, "the stream ends within %d ms", WAIT_MS);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the publisher process succeeded");
    rps_subscription_destroy(&sub);
    rps_node_destroy(&node);
}

/* Makes and destroys a node, a publisher and a subscription `n` times (for valgrind). */
static void cycles(long n) {
    for (long i = 0; i < n; i++) {
        rps_node *node = make_node();
        rps_publisher *pub = NULL;
        OK(rps_publisher_create(node, "c-cycles", NULL, &pub));
        rps_subscription *sub = NULL;
        OK(rps_subscription_create(node, "c-cycles", NULL, &sub));
        rps_subscription_destroy(&sub);
        OK(rps_publisher_destroy(&pub));
        rps_node_destroy(&node);
    }
}

struct test {
    const char *name;
    void (*run)(void);
};

static const struct test TESTS[] = {
    {"round_trip", round_trip},
    {"pattern", pattern},
    {"null_handles_and_destroying_twice", null_handles_and_destroying_twice},
    {"a_wrong_credential_is_refused", a_wrong_credential_is_refused},
    {"a_loan_dropped_unsent_publishes_nothing", a_loan_dropped_unsent_publishes_nothing},
    {"an_exclusive_handle_holds_the_publisher_until_it_ends", an_exclusive_handle_holds_the_publisher_until_it_ends},
    {"struct_layouts_match", struct_layouts_match},
    {"a_publisher_shared_by_four_threads", a_publisher_shared_by_four_threads},
    {"two_processes", two_processes},
};

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc == 3 && strcmp(argv[1], "publisher-process") == 0) return publisher_process(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "cycles") == 0) {
        cycles(atol(argv[2]));
        printf("cycles: %s done\n", argv[2]);
        return 0;
    }
    size_t n = sizeof TESTS / sizeof TESTS[0], ran = 0;
    for (size_t i = 0; i < n; i++) {
        bool wanted = argc == 1;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], TESTS[i].name) == 0;
        if (!wanted) continue;
        printf("test %s ... ", TESTS[i].name);
        fflush(stdout);
        TESTS[i].run();
        printf("ok\n");
        ran++;
    }
    CHECK(ran > 0, "no test named so");
    printf("%zu C tests passed\n", ran);
    return 0;
}
