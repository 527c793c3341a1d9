"""Fixtures: two nodes without discovery (connected by address, loopback only), and a
connected publisher and subscriber of a fresh topic."""

import itertools

import pytest

import rdma_pubsub

_topics = itertools.count()

# Every wait of the suite is bounded by this many seconds.
TIMEOUT = 10.0


@pytest.fixture
def nodes():
    with rdma_pubsub.Node(discovery=False) as a, rdma_pubsub.Node(discovery=False) as b:
        yield a, b


@pytest.fixture
def topic():
    return f"pytest-{next(_topics)}"


@pytest.fixture
def pair(nodes, topic):
    """A publisher on one node and a subscriber (from the earliest message) on the other, connected."""
    a, b = nodes
    publisher = a.publisher(topic)
    subscriber = b.subscriber(topic, start="earliest")
    subscriber.connect_wait(a.local_addr, timeout=TIMEOUT)
    yield publisher, subscriber
    subscriber.close()
    publisher.close()
