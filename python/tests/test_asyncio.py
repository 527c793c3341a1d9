"""asyncio: ``await sub.recv()`` and ``async for``, woken by the readiness descriptor."""

import asyncio
import threading

import pytest

import rdma_pubsub
from rdma_pubsub import AsyncSubscriber

from conftest import TIMEOUT


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT))


def test_await_recv_is_woken_by_a_message_published_later(pair):
    publisher, subscriber = pair
    asynchronous = AsyncSubscriber(subscriber)

    async def main():
        loop = asyncio.get_running_loop()
        threads = threading.active_count()
        # Published once the loop waits on the descriptor.
        loop.call_soon(publisher.publish, b"later")
        message = await asynchronous.recv()
        assert threading.active_count() == threads  # no thread of its own
        return bytes(message)

    assert run(main()) == b"later"


def test_await_recv_times_out_with_none(pair):
    _, subscriber = pair
    assert run(AsyncSubscriber(subscriber).recv(timeout=0.05)) is None


def test_async_for_ends_when_the_publisher_closes(pair):
    publisher, subscriber = pair

    async def main():
        loop = asyncio.get_running_loop()
        for i in range(5):
            publisher.publish(bytes([i]))
        # Closing lingers until the subscriber has read everything: another thread closes.
        closing = loop.run_in_executor(None, publisher.close)
        received = [bytes(message) async for message in subscriber]
        await closing
        return received

    assert run(main()) == [bytes([i]) for i in range(5)]
    assert [event.kind for event in subscriber.events()] == ["connected", "ended"]


def test_other_tasks_run_while_recv_waits(pair):
    publisher, subscriber = pair

    async def publish_later():
        await asyncio.sleep(0)
        publisher.publish(b"from a task")

    async def main():
        task = asyncio.create_task(publish_later())
        message = await AsyncSubscriber(subscriber).recv()
        await task
        return bytes(message)

    assert run(main()) == b"from a task"


def test_errors_surface_from_await(nodes, topic):
    _, b = nodes
    lonely = b.subscriber(topic)
    with pytest.raises(rdma_pubsub.NotConnectedError):
        run(AsyncSubscriber(lonely).recv())
