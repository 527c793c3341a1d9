"""A publisher in another process: its messages arrive whole and in order."""

import os
import selectors
import subprocess
import sys

from conftest import TIMEOUT


PUBLISHER = r"""
import sys, rdma_pubsub
count = int(sys.argv[1])
with rdma_pubsub.Node(discovery=False) as node:
    publisher = node.publisher("pytest-processes")
    print(node.local_addr, flush=True)
    publisher.wait_for_subscribers(1, timeout=10)
    for i in range(count):
        publisher.publish(i.to_bytes(4, "little") * 256)
    publisher.flush(timeout=10)
"""


def read_line(process, timeout):
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), "the child printed its address in time"
    return process.stdout.readline().strip()


def test_messages_of_a_publisher_in_another_process(nodes):
    _, b = nodes
    count = 200
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with subprocess.Popen(
        [sys.executable, "-c", PUBLISHER, str(count)], stdout=subprocess.PIPE, text=True, env=env
    ) as child:
        try:
            addr = read_line(child, TIMEOUT)
            subscriber = b.subscriber("pytest-processes", start="earliest")
            subscriber.connect_wait(addr, timeout=TIMEOUT)
            for i in range(count):
                message = subscriber.recv(timeout=TIMEOUT)
                assert message is not None
                assert bytes(message) == i.to_bytes(4, "little") * 256
            # Receiving on acks the last messages, so the child's flush returns and it exits:
            # then the stream ends.
            assert sum(1 for message in subscriber) == 0
            assert child.wait(timeout=TIMEOUT) == 0
        finally:
            child.kill()
    assert subscriber.publishers == []
