"""Ctrl-C interrupts a blocking receive, which releases the GIL while it waits."""

import _thread
import signal
import threading
import time

import pytest

from conftest import TIMEOUT


def test_keyboard_interrupt_ends_a_blocking_recv(pair):
    _, subscriber = pair
    # Python's own SIGINT handler, whatever the runner left: a suite started in the background
    # (`scripts/test.sh &`, nohup) inherits SIGINT ignored, and then interrupt_main does nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            subscriber.recv(timeout=TIMEOUT)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < TIMEOUT / 2


def test_other_threads_run_while_recv_waits(pair):
    publisher, subscriber = pair
    entered = threading.Event()
    received = []

    def receive():
        entered.set()
        received.append(subscriber.recv(timeout=TIMEOUT))

    thread = threading.Thread(target=receive)
    thread.start()
    assert entered.wait(TIMEOUT)
    # This thread needs the GIL to publish while the other one waits in recv: were the GIL
    # held through the wait, recv would time out with nothing.
    started = time.monotonic()
    publisher.publish(b"from the main thread")
    thread.join(timeout=TIMEOUT)
    assert not thread.is_alive()
    assert received[0] is not None and bytes(received[0]) == b"from the main thread"
    assert time.monotonic() - started < TIMEOUT / 2
