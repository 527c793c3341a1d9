"""Type stubs of the native module ``rdma_pubsub._native`` (re-exported by ``rdma_pubsub``)."""

import os
from types import TracebackType
from typing import Dict, Iterator, List, Literal, Optional, Sequence, Type, Union

from ._aio import AsyncSubscriber

Buffer = Union[bytes, bytearray, memoryview, object]
"""Any object with the buffer protocol (C-contiguous)."""
Secret = Union[bytes, str]
Policy = Literal["block", "drop_slow", "overwrite"]

class PublisherInfo:
    """Who published a message."""

    @property
    def id(self) -> int:
        """The publisher's id (stable for a node and topic)."""
    @property
    def epoch(self) -> int:
        """Its node's epoch: a restarted node has a larger one."""
    @property
    def addr(self) -> str:
        """Its node's ``"ip:port"``."""
    @property
    def policy(self) -> str:
        """``"block"``, ``"drop_slow"`` or ``"overwrite"``."""
    @property
    def data_path(self) -> str:
        """``"shared_memory"`` or ``"network"``."""

class Event:
    """Something that happened to a subscriber's connections; fields a kind lacks are None."""

    @property
    def kind(self) -> str:
        """``"connected"``, ``"lost"``, ``"ended"``, ``"dropped"``, ``"message_too_large"``,
        ``"record_too_large"``, ``"disconnected"``, ``"rejected"``, ``"unreachable"``,
        ``"unauthenticated"``, ``"publisher_lost"``, ``"feed_limit"``, ``"listing_failed"``."""
    @property
    def publisher(self) -> Optional[PublisherInfo]: ...
    @property
    def addr(self) -> Optional[str]: ...
    @property
    def topic(self) -> Optional[str]:
        """The publisher's topic (``"rejected"``, ``"unauthenticated"``, ``"publisher_lost"``,
        ``"feed_limit"``)."""
    @property
    def count(self) -> Optional[int]: ...
    @property
    def final_seq(self) -> Optional[int]: ...
    @property
    def complete(self) -> Optional[bool]: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def detail(self) -> Optional[str]: ...
    @property
    def len(self) -> Optional[int]: ...
    @property
    def limit(self) -> Optional[int]: ...

class Message:
    """A received message; its payload is lent zero copy (buffer protocol, read only) until
    :meth:`release`, the end of a ``with`` block, or the subscriber's next receive. Views of
    it must be released before then (else that call raises ``BufferError``)."""

    @property
    def seq(self) -> int:
        """The sequence number in its publisher's stream (1, 2, ...)."""
    @property
    def publisher(self) -> PublisherInfo:
        """Who published it."""
    @property
    def topic(self) -> str:
        """Its topic (on a subscriber to a pattern, the topic that matched)."""
    @property
    def payload(self) -> memoryview:
        """The payload, a read-only memoryview without copying."""
    @property
    def valid(self) -> bool:
        """Whether the payload is still readable."""
    def release(self) -> None:
        """Ends the payload's lend now; ``BufferError`` while views of it are alive."""
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes:
        """A copy of the payload, which outlives the message."""
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> "Message": ...
    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool: ...

class Loan:
    """Ring space lent by :meth:`Publisher.loan`: a writable buffer; :meth:`send` it once
    written and its views released. As a context manager it sends on a clean exit and
    abandons on an exception."""

    def send(self) -> int:
        """Publishes the message; returns its sequence number."""
    def abandon(self) -> None:
        """Gives the space back without publishing."""
    @property
    def view(self) -> memoryview:
        """A writable memoryview of the loan (release it before :meth:`send`)."""
    @property
    def outstanding(self) -> bool:
        """Neither sent nor abandoned yet."""
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> "Loan": ...
    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool: ...

class Publisher:
    """A publisher of one topic; safe to share between threads."""

    def publish(self, data: Buffer) -> int:
        """Copies ``data`` (any buffer) into the ring as one message; returns its sequence number."""
    def loan(self, size: int) -> Loan:
        """Lends ``size`` bytes of the ring to write the next message in place."""
    def flush(self, timeout: float = 10.0) -> None:
        """Waits until every subscriber consumed everything; ``TimeoutError`` otherwise."""
    def wait_for_subscribers(self, n: int = 1, timeout: float = 10.0) -> int:
        """Waits until at least ``n`` subscribers are connected; returns how many are."""
    @property
    def topic(self) -> str: ...
    @property
    def id(self) -> int: ...
    @property
    def subscriber_count(self) -> int: ...
    @property
    def next_seq(self) -> int: ...
    @property
    def counters(self) -> Dict[str, int]: ...
    def close(self) -> None:
        """Ends the stream (lingering until subscribers read it, at most 2 s)."""
    def __enter__(self) -> "Publisher": ...
    def __exit__(self, *exc: object) -> bool: ...

class Subscriber:
    """A subscriber of one topic, or of every topic a pattern includes (``"sensors/**"``, found
    by discovery or listed by the nodes it connects to); ``for msg in sub`` and
    ``async for msg in sub``."""

    def recv(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message, or None after ``timeout`` seconds; Ctrl-C interrupts it."""
    def try_recv(self) -> Optional[Message]:
        """A message that has arrived already, or None."""
    def __iter__(self) -> Iterator[Message]: ...
    def __next__(self) -> Message: ...
    def __aiter__(self) -> AsyncSubscriber: ...
    def connect(self, addr: str) -> None:
        """Starts connecting to the node at ``addr`` (``"ip:port"``)."""
    def connect_wait(self, addr: str, timeout: float = 10.0) -> PublisherInfo:
        """Connects to ``addr`` and waits for its publisher's answer."""
    def try_event(self) -> Optional[Event]: ...
    def events(self) -> List[Event]: ...
    def fileno(self) -> int:
        """The readiness descriptor, for event loops (never read or close it)."""
    def prepare_wait(self) -> bool:
        """Arms :meth:`fileno`; True when something may be ready already."""
    @property
    def publishers(self) -> List[PublisherInfo]: ...
    @property
    def counters(self) -> Dict[str, int]: ...
    @property
    def topic(self) -> str: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Subscriber": ...
    def __exit__(self, *exc: object) -> bool: ...

class Node:
    """A node; a context manager. Handles it made stay safe after it closes."""

    def __init__(
        self,
        *,
        fabric: Literal["auto", "soft", "verbs"] = "auto",
        domain: Optional[int] = None,
        discovery: bool = True,
        peers: Optional[Sequence[str]] = None,
        discovery_port: Optional[int] = None,
        bind: Optional[str] = None,
        domain_secret: Optional[Secret] = None,
        domain_secret_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        same_host: bool = True,
        stats: bool = False,
    ) -> None: ...
    def publisher(
        self,
        topic: str,
        *,
        policy: Policy = "block",
        timeout: float = 5.0,
        credential: Optional[Secret] = None,
        ring_capacity: Optional[int] = None,
        max_record_payload: Optional[int] = None,
        max_subscribers: Optional[int] = None,
        idle_timeout: Optional[float] = None,
    ) -> Publisher: ...
    def subscriber(
        self,
        topic: str,
        *,
        start: Literal["latest", "earliest"] = "latest",
        credential: Optional[Secret] = None,
        auto_connect: bool = True,
        connect: Optional[Sequence[str]] = None,
        batch: Optional[int] = None,
        busy_poll: bool = False,
        max_message_len: Optional[int] = None,
        max_record_payload: Optional[int] = None,
        max_feeds: Optional[int] = None,
    ) -> Subscriber: ...
    @property
    def local_addr(self) -> str: ...
    @property
    def discovery_addr(self) -> Optional[str]: ...
    @property
    def id(self) -> int: ...
    @property
    def counters(self) -> Dict[str, int]: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Node": ...
    def __exit__(self, *exc: object) -> bool: ...
