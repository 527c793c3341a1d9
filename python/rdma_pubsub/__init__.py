"""rdma_pubsub: publish/subscribe over RDMA, embedded in the process (no broker).

A :class:`Node` publishes and subscribes on topics::

    with rdma_pubsub.Node(discovery=False) as node:
        pub = node.publisher("prices")
        sub = node.subscriber("prices", start="earliest")
        sub.connect_wait(node.local_addr)
        pub.publish(b"hello")
        with sub.recv(timeout=5) as msg:
            print(bytes(msg))

Received payloads are zero copy: a :class:`Message` lends the bytes the subscriber READ from
the publisher's ring through the buffer protocol until the next receive (see
:class:`Message`). :meth:`Publisher.loan` lends ring space to write a message in place.
Blocking calls release the GIL and are interrupted by Ctrl-C. Errors are the classes of
:mod:`rdma_pubsub.errors`.
"""

from . import errors
from ._aio import AsyncSubscriber
from ._native import Event, Loan, Message, Node, Publisher, PublisherInfo, Subscriber
from .errors import *  # noqa: F401,F403 (the exceptions, at the package's top level too)

__all__ = [
    "Node",
    "Publisher",
    "Loan",
    "Subscriber",
    "AsyncSubscriber",
    "Message",
    "PublisherInfo",
    "Event",
    "errors",
] + errors.__all__
