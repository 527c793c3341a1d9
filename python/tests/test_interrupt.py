"""Ctrl-C interrupts a blocking receive, which releases the GIL while it waits."""

import _thread
import threading
import time

import pytest

from conftest import TIMEOUT


def test_keyboard_interrupt_ends_a_blocking_recv(pair):
    _, subscriber = pair
    timer = threading.Timer(0.2, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            subscriber.recv(timeout=TIMEOUT)
    finally:
        timer.cancel()
    assert time.monotonic() - started < TIMEOUT / 2


def test_other_threads_run_while_recv_waits(pair):
    publisher, subscriber = pair
    # The publishing thread needs the GIL while the main thread is blocked in recv.
    thread = threading.Thread(target=publisher.publish, args=(b"from a thread",))
    thread.start()
    message = subscriber.recv(timeout=TIMEOUT)
    thread.join(timeout=TIMEOUT)
    assert message is not None and bytes(message) == b"from a thread"
