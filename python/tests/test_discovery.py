"""Discovery from Python: a subscriber finds a publisher by itself (unicast, on loopback)."""

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


def test_without_discovery_a_node_has_no_discovery_address():
    with rdma_pubsub.Node(discovery=False) as node:
        assert node.discovery_addr is None
