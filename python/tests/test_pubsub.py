"""Round trips, loans, iteration, events, counters, errors, threads and garbage collection."""

import gc
import struct
import threading

import numpy as np
import pytest

import rdma_pubsub
from rdma_pubsub import errors

from conftest import TIMEOUT


def test_a_round_trip_of_every_kind_of_buffer(pair):
    publisher, subscriber = pair
    sent = [b"bytes", bytearray(b"bytearray"), memoryview(b"xmemoryview")[1:], np.arange(4, dtype=np.float64), b""]
    for data in sent:
        publisher.publish(data)
    for seq, data in enumerate(sent, start=1):
        message = subscriber.recv(timeout=TIMEOUT)
        assert message is not None
        assert message.seq == seq
        assert bytes(message) == bytes(memoryview(data).cast("B"))
        assert len(message) == memoryview(data).nbytes
        assert message.publisher.id == publisher.id
        assert message.publisher.policy == "block"


def test_recv_times_out_with_none(pair):
    _, subscriber = pair
    assert subscriber.recv(timeout=0.05) is None
    assert subscriber.try_recv() is None


def test_a_numpy_array_round_trips_through_frombuffer(pair):
    publisher, subscriber = pair
    array = np.linspace(0.0, 1.0, 1000, dtype=np.float32)
    publisher.publish(array)
    with subscriber.recv(timeout=TIMEOUT) as message:
        received = np.frombuffer(message, dtype=np.float32)
        assert np.array_equal(received, array)
        assert not received.flags.writeable
        del received


def test_a_loan_is_written_in_place_then_sent(pair):
    publisher, subscriber = pair
    loan = publisher.loan(16)
    assert len(loan) == 16 and loan.outstanding
    view = memoryview(loan)
    view[:] = struct.pack("<qq", 7, 42)
    with pytest.raises(BufferError):
        loan.send()  # a view of it is alive
    view.release()
    assert loan.send() == 1
    assert not loan.outstanding
    with pytest.raises(ValueError):
        memoryview(loan)  # its bytes are gone
    message = subscriber.recv(timeout=TIMEOUT)
    assert struct.unpack("<qq", bytes(message)) == (7, 42)


def test_a_loan_as_a_context_manager_sends_on_exit_and_abandons_on_error(pair):
    publisher, subscriber = pair
    with pytest.raises(RuntimeError):
        with publisher.loan(8) as loan:
            np.frombuffer(loan, dtype=np.uint8)[:] = 1
            raise RuntimeError("abandon it")
    with publisher.loan(8) as loan:
        np.frombuffer(loan, dtype=np.uint64)[0] = 99
    message = subscriber.recv(timeout=TIMEOUT)
    assert (message.seq, np.frombuffer(message, dtype=np.uint64)[0]) == (1, 99)


def test_publishing_while_this_thread_holds_a_loan_raises_loan_outstanding(pair):
    publisher, _ = pair
    loan = publisher.loan(8)
    with pytest.raises(errors.LoanOutstandingError):
        publisher.publish(b"x")
    with pytest.raises(errors.LoanOutstandingError):
        publisher.loan(8)
    loan.abandon()
    assert publisher.publish(b"x") == 1


def test_iteration_ends_when_the_publisher_closes(pair):
    publisher, subscriber = pair
    for i in range(3):
        publisher.publish(bytes([i]))
    # Closing lingers until the subscriber has read everything: another thread closes.
    closing = threading.Thread(target=publisher.close)
    closing.start()
    received = [bytes(message) for message in subscriber]
    closing.join(timeout=TIMEOUT)
    assert received == [b"\x00", b"\x01", b"\x02"]
    kinds = [event.kind for event in subscriber.events()]
    assert kinds == ["connected", "ended"]


def test_counters_count_what_moved(pair):
    publisher, subscriber = pair
    publisher.publish(b"12345")
    subscriber.recv(timeout=TIMEOUT)
    assert publisher.counters["published"] == 1
    assert subscriber.counters["delivered"] == 1
    assert subscriber.counters["bytes"] == 5


def test_errors_mirror_the_library_and_the_builtins(nodes, topic):
    a, b = nodes
    with pytest.raises(errors.InvalidTopicError) as invalid:
        a.publisher("a/*/wildcard")
    assert isinstance(invalid.value, ValueError) and isinstance(invalid.value, rdma_pubsub.Error)
    publisher = a.publisher(topic)
    with pytest.raises(errors.AlreadyPublishingError):
        a.publisher(topic)
    subscriber = b.subscriber(topic + "-nobody")
    with pytest.raises(errors.NotConnectedError):
        subscriber.recv(timeout=TIMEOUT)
    with pytest.raises(errors.RejectedError) as rejected:
        subscriber.connect_wait(a.local_addr, timeout=TIMEOUT)  # no such topic there
    assert rejected.value.reason == "UnknownTopic"
    with pytest.raises(ValueError):
        a.publisher(topic + "-x", policy="sometimes")
    publisher.close()


def test_a_wrong_or_missing_credential_raises_unauthorized(nodes, topic):
    a, b = nodes
    publisher = a.publisher(topic, credential=b"the right secret, long enough")
    wrong = b.subscriber(topic, credential=b"a wrong secret, long enough too")
    with pytest.raises(errors.UnauthorizedError) as unauthorized:
        wrong.connect_wait(a.local_addr, timeout=TIMEOUT)
    assert isinstance(unauthorized.value, errors.RejectedError)
    assert unauthorized.value.peer == a.local_addr
    missing = b.subscriber(topic)
    with pytest.raises(errors.UnauthorizedError):
        missing.connect_wait(a.local_addr, timeout=TIMEOUT)
    right = b.subscriber(topic, credential="the right secret, long enough")
    assert right.connect_wait(a.local_addr, timeout=TIMEOUT).id == publisher.id


def test_a_credentialed_subscriber_refuses_a_publisher_that_cannot_prove_it(nodes, topic):
    a, b = nodes
    publisher = a.publisher(topic)  # no credential: it cannot tag its accept under one  # noqa: F841
    guarded = b.subscriber(topic, credential=b"the topic's secret, long enough")
    with pytest.raises(errors.UnauthenticatedError) as refused:
        guarded.connect_wait(a.local_addr, timeout=TIMEOUT)
    assert isinstance(refused.value, ConnectionError)
    assert refused.value.peer == a.local_addr
    assert "credential" in refused.value.detail


def test_four_threads_publishing_each_keep_their_order(pair):
    publisher, subscriber = pair
    per_thread = 500
    failures = []

    def publish(thread):
        try:
            for i in range(per_thread):
                publisher.publish(struct.pack("<II", thread, i))
        except Exception as e:  # surfaced below
            failures.append(e)

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    next_of = [0] * 4
    for _ in range(4 * per_thread):
        message = subscriber.recv(timeout=TIMEOUT)
        assert message is not None, "a message within the timeout"
        thread, i = struct.unpack("<II", bytes(message))
        assert i == next_of[thread]
        next_of[thread] += 1
    for t in threads:
        t.join(timeout=TIMEOUT)
        assert not t.is_alive()
    assert failures == []
    assert next_of == [per_thread] * 4


def test_nodes_collected_while_their_handles_live_do_not_crash(topic):
    a = rdma_pubsub.Node(discovery=False)
    b = rdma_pubsub.Node(discovery=False)
    publisher = a.publisher(topic)
    subscriber = b.subscriber(topic, start="earliest")
    subscriber.connect_wait(a.local_addr, timeout=TIMEOUT)
    publisher.publish(b"before")
    message = subscriber.recv(timeout=TIMEOUT)
    view = memoryview(message)
    del a, b
    gc.collect()
    assert bytes(view) == b"before"  # the payload is still lent, the nodes gone
    view.release()
    try:
        publisher.publish(b"after")
        subscriber.recv(timeout=1.0)
    except rdma_pubsub.Error:
        pass  # the nodes are closed: an error, never a crash
    del publisher, message
    gc.collect()
    del subscriber
    gc.collect()


def test_a_closed_node_refuses_new_handles_with_closed(nodes, topic):
    a, _ = nodes
    a.close()
    assert a.closed
    with pytest.raises(errors.ClosedError):
        a.publisher(topic)
