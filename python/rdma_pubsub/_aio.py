"""asyncio for subscribers: :class:`AsyncSubscriber`, driven by the subscriber's readiness
descriptor through ``loop.add_reader``, with no thread of its own."""

import asyncio
from typing import Any, Optional

from ._native import Message, Subscriber
from .errors import ClosedError, NotConnectedError

__all__ = ["AsyncSubscriber"]


def _wake(ready: "asyncio.Future[None]") -> None:
    if not ready.done():
        ready.set_result(None)


class AsyncSubscriber:
    """A :class:`Subscriber` for asyncio: ``msg = await sub.recv()`` and
    ``async for msg in sub``. Messages are the same zero-copy :class:`Message` objects as the
    synchronous ``recv`` gives, with the same lending rule (release views of one before the
    next receive). Waits register the subscriber's descriptor (:meth:`Subscriber.fileno`) with
    the running loop and arm it with :meth:`Subscriber.prepare_wait`; nothing polls, no thread
    runs. Every other attribute is the wrapped subscriber's (``events()``, ``counters``,
    ``connect_wait``, ...). ``async for msg in subscriber`` on a plain :class:`Subscriber`
    makes one of these.
    """

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    @property
    def subscriber(self) -> Subscriber:
        """The wrapped synchronous subscriber."""
        return self._subscriber

    async def recv(self, timeout: Optional[float] = None) -> Optional[Message]:
        """Waits for the next message, up to ``timeout`` seconds (``None``: as long as it
        takes); returns it, or ``None`` on time out. Raises as :meth:`Subscriber.recv`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        subscriber = self._subscriber
        fd = subscriber.fileno()
        while True:
            message = subscriber.try_recv()
            if message is not None:
                return message
            if subscriber.prepare_wait():
                continue
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            ready: "asyncio.Future[None]" = loop.create_future()
            loop.add_reader(fd, _wake, ready)
            try:
                await asyncio.wait((ready,), timeout=left)
            finally:
                loop.remove_reader(fd)
                ready.cancel()

    def __aiter__(self) -> "AsyncSubscriber":
        return self

    async def __anext__(self) -> Message:
        try:
            message = await self.recv()
        except ClosedError:
            raise StopAsyncIteration from None
        except NotConnectedError as ended:
            if getattr(ended, "discovery", True):
                raise
            raise StopAsyncIteration from None
        assert message is not None  # no timeout: recv returns a message or raises
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._subscriber, name)

    def __repr__(self) -> str:
        return f"<rdma_pubsub.AsyncSubscriber of {self._subscriber.topic!r}>"
