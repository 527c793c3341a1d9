"""The exceptions of rdma_pubsub: one class per variant of the Rust library's ``Error``.

Every exception derives from :class:`Error`; some also derive from the builtin they resemble,
so ``except TimeoutError`` and ``except ValueError`` catch them too. Fields of the Rust
variant are attributes (``peer``, ``reason``, ``detail``, ``len``, ``limit``, ...).
"""

import builtins

__all__ = [
    "Error",
    "FabricError",
    "PeerMisbehavedError",
    "InvalidSecretError",
    "InternalError",
    "LoanOutstandingError",
    "TimeoutError",
    "InvalidTopicError",
    "AlreadyPublishingError",
    "InvalidOptionError",
    "RejectedError",
    "UnauthorizedError",
    "RecordTooLargeError",
    "MessageTooLargeError",
    "UnreachableError",
    "UnauthenticatedError",
    "TypeMismatchError",
    "DroppedError",
    "NotConnectedError",
    "EncodeError",
    "DecodeError",
    "ClosedError",
]


class Error(Exception):
    """An error of a node, publisher or subscriber (the Rust ``rdma_pubsub::Error``)."""


class FabricError(Error):
    """The transport failed."""


class PeerMisbehavedError(Error):
    """A peer sent what the protocol does not allow; the connection to it ends (``detail``)."""


class InvalidSecretError(Error, ValueError):
    """A domain secret or a topic credential could not be made or read."""


class InternalError(Error):
    """A broken invariant of the library (a bug, to report with ``detail``)."""


class LoanOutstandingError(Error):
    """A loan of this publisher is outstanding in this thread: send or abandon it first."""


class TimeoutError(Error, builtins.TimeoutError):
    """A blocking call ran out of time (``what``, ``millis``)."""


class InvalidTopicError(Error, ValueError):
    """The topic name is not usable (``topic``, ``detail``)."""


class AlreadyPublishingError(Error):
    """This node already publishes the topic (``topic``): share the publisher."""


class InvalidOptionError(Error, ValueError):
    """An option is out of range (``option``, ``detail``)."""


class RejectedError(Error, ConnectionError):
    """A publisher refused the subscription (``peer``, ``reason``, ``detail``)."""


class UnauthorizedError(RejectedError):
    """A publisher refused the subscription's credential: missing or wrong."""


class RecordTooLargeError(Error):
    """A publisher's records are larger than the subscriber reads (``peer``, ``len``, ``limit``)."""


class MessageTooLargeError(Error):
    """A message is over the limit that applies to it (``len``, ``limit``)."""


class UnreachableError(Error, ConnectionError):
    """No node answered at that address (``peer``, ``detail``)."""


class UnauthenticatedError(Error, ConnectionError):
    """A publisher's accept did not prove what the subscriber requires: a tag under the domain
    secret or the topic's credential answering its connect, or the publisher discovery announced
    (``peer``, ``detail``). Nothing was read from it."""


class DroppedError(Error, ConnectionError):
    """Every publisher the subscriber knows dropped it (too slow under DropSlow, idle, a protocol
    violation) (``peer``, ``publisher``, ``reason``)."""


class TypeMismatchError(RejectedError):
    """The publisher's messages are of another type than the subscriber's (``detail`` names both)."""


class NotConnectedError(Error):
    """The subscriber has no publisher now (``topic``). With ``discovery`` off, connect one; with
    it on, a publisher may appear later."""


class EncodeError(Error):
    """A value could not be serialized into a message (``detail``)."""


class DecodeError(Error):
    """A message could not be deserialized (``publisher``, ``seq``, ``detail``)."""


class ClosedError(Error):
    """The subscriber has no publisher left and nothing more to deliver, or the handle is closed."""
