"""The payload is lent from the subscription's READ buffer (the image of the publisher's ring)
without copying, and never outlives it."""

import numpy as np
import pytest

from conftest import TIMEOUT

# A ring record: a 32-byte header, then the payload, padded to 32 bytes (wire/src/ring/layout.rs).
HEADER_LEN = 32
RECORD_ALIGN = 32


def address_of(message):
    return np.frombuffer(message, dtype=np.uint8).ctypes.data


def test_views_of_a_payload_share_its_memory(pair):
    publisher, subscriber = pair
    publisher.publish(b"shared" * 10)
    message = subscriber.recv(timeout=TIMEOUT)
    first, second = np.frombuffer(message, dtype=np.uint8), np.frombuffer(message.payload, dtype=np.uint8)
    assert first.ctypes.data == second.ctypes.data == address_of(message)
    assert np.shares_memory(first, second)
    del first, second


def test_consecutive_payloads_lie_a_ring_record_apart_in_the_read_buffer(pair):
    publisher, subscriber = pair
    # Both are in the ring before the subscriber's first READ, which brings them together.
    publisher.publish(bytes(range(64)))
    publisher.publish(bytes(range(64, 128)))
    first = subscriber.recv(timeout=TIMEOUT)
    first_address = address_of(first)
    second = subscriber.recv(timeout=TIMEOUT)
    stride = -(-(HEADER_LEN + 64) // RECORD_ALIGN) * RECORD_ALIGN
    # Where the ring put it: the payload was not copied out of the READ buffer.
    assert address_of(second) - first_address == stride
    assert bytes(second) == bytes(range(64, 128))


def test_a_payload_is_read_only_and_ends_with_the_next_receive(pair):
    publisher, subscriber = pair
    publisher.publish(b"one")
    publisher.publish(b"two")
    first = subscriber.recv(timeout=TIMEOUT)
    view = first.payload
    assert view.readonly
    with pytest.raises(BufferError):
        subscriber.recv(timeout=TIMEOUT)  # the view of the first is alive
    assert bytes(view) == b"one"
    view.release()
    second = subscriber.recv(timeout=TIMEOUT)
    assert not first.valid and second.valid
    with pytest.raises(ValueError):
        memoryview(first)
    assert bytes(second) == b"two"


def test_a_slice_of_a_view_holds_the_payload_too(pair):
    publisher, subscriber = pair
    publisher.publish(b"abcdef")
    publisher.publish(b"next")
    message = subscriber.recv(timeout=TIMEOUT)
    view = message.payload
    tail = view[3:]
    view.release()
    with pytest.raises(BufferError):
        subscriber.recv(timeout=TIMEOUT)  # `tail` still exports the payload
    assert bytes(tail) == b"def"
    del tail
    assert bytes(subscriber.recv(timeout=TIMEOUT)) == b"next"


def test_release_ends_the_lend_early_and_refuses_while_viewed(pair):
    publisher, subscriber = pair
    publisher.publish(b"x")
    message = subscriber.recv(timeout=TIMEOUT)
    array = np.frombuffer(message, dtype=np.uint8)
    with pytest.raises(BufferError):
        message.release()
    del array
    message.release()
    assert not message.valid
    with pytest.raises(ValueError):
        bytes(message)
