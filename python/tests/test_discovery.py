"""Discovery from Python: a subscriber finds a publisher by itself (unicast, on loopback); a
pattern subscriber without discovery reads the topics listed by the node it connects to."""

import time

import rdma_pubsub

from conftest import TIMEOUT


def test_a_subscriber_finds_a_publisher_announced_to_its_node(topic):
    with rdma_pubsub.Node(peers=[], bind="127.0.0.1:0") as b:
        assert b.discovery_addr is not None
        with rdma_pubsub.Node(peers=[b.discovery_addr], bind="127.0.0.1:0") as a:
            subscriber = b.subscriber(topic, start="earliest")
            publisher = a.publisher(topic)
            publisher.publish(b"found by discovery")
            message = subscriber.recv(timeout=TIMEOUT)  # no connect: the announcement led it there
            assert message is not None and bytes(message) == b"found by discovery"
            assert [event.kind for event in subscriber.events()] == ["connected"]
            subscriber.close()
            publisher.close()


def test_a_pattern_subscriber_reads_each_matching_topic_and_names_it(topic):
    with rdma_pubsub.Node(peers=[], bind="127.0.0.1:0") as b:
        with rdma_pubsub.Node(peers=[b.discovery_addr], bind="127.0.0.1:0") as a:
            subscriber = b.subscriber(f"{topic}/*", start="earliest")
            assert subscriber.topic == f"{topic}/*"
            publishers = [a.publisher(f"{topic}/{name}") for name in ("x", "y")]
            other = a.publisher(f"{topic}-other")
            for publisher in publishers + [other]:
                publisher.publish(publisher.topic.encode())
            received = []
            for _ in range(2):
                message = subscriber.recv(timeout=TIMEOUT)
                assert message is not None
                assert bytes(message) == message.topic.encode(), "each message names its topic"
                received.append(message.topic)
            assert sorted(received) == [f"{topic}/x", f"{topic}/y"]
            assert other.subscriber_count == 0
            subscriber.close()
            for publisher in publishers + [other]:
                publisher.close()


def test_past_max_feeds_a_pattern_subscriber_tells_of_the_publisher_it_does_not_read(topic):
    with rdma_pubsub.Node(peers=[], bind="127.0.0.1:0") as b:
        with rdma_pubsub.Node(peers=[b.discovery_addr], bind="127.0.0.1:0") as a:
            publishers = [a.publisher(f"{topic}/{name}") for name in ("x", "y")]
            subscriber = b.subscriber(f"{topic}/*", max_feeds=1)
            events = []
            deadline = time.monotonic() + TIMEOUT
            while not any(e.kind == "feed_limit" for e in events):
                assert time.monotonic() < deadline, events
                subscriber.recv(timeout=0.02)
                events.extend(subscriber.events())
            limited = [e for e in events if e.kind == "feed_limit"]
            assert len(limited) == 1 and limited[0].limit == 1
            assert limited[0].topic in (f"{topic}/x", f"{topic}/y")
            assert subscriber.counters["feed_limit_reached"] == 1
            subscriber.close()
            for publisher in publishers:
                publisher.close()


def test_without_discovery_a_node_has_no_discovery_address():
    with rdma_pubsub.Node(discovery=False) as node:
        assert node.discovery_addr is None


def test_without_discovery_a_pattern_subscriber_reads_the_matching_topics_its_node_lists(nodes, topic):
    a, b = nodes
    publishers = [a.publisher(f"{topic}/{name}") for name in ("x", "y")]
    other = a.publisher(f"{topic}-other")
    subscriber = b.subscriber(f"{topic}/*", start="earliest", connect=[a.local_addr])
    for publisher in publishers + [other]:
        publisher.publish(publisher.topic.encode())
    received = []
    for _ in range(2):
        message = subscriber.recv(timeout=TIMEOUT)
        assert message is not None
        assert bytes(message) == message.topic.encode(), "each message names its topic"
        received.append(message.topic)
    assert sorted(received) == [f"{topic}/x", f"{topic}/y"]
    assert other.subscriber_count == 0
    subscriber.close()
    for publisher in publishers + [other]:
        publisher.close()
