"""Rates from Python: 64-byte messages published and received, and 1 MiB messages received
into numpy arrays (views of the READ buffer, no copy), publisher and subscriber in two
processes on this host.

    python bench.py [--small 200000] [--large 2000]

Compare the 1 MiB figure with `pubsub-demo bench --sizes 1048576 --subscribers 1` run on the
same machine at the same time.
"""

import argparse
import subprocess
import sys
import time

import numpy as np

import rdma_pubsub

TIMEOUT = 30.0


def publisher_process(size: int, count: int) -> None:
    """The child: publishes `count` messages of `size` bytes once a subscriber is connected,
    prints its rate, then waits until they are consumed."""
    with rdma_pubsub.Node(discovery=False) as node:
        capacity = max(1 << 20, min(64 << 20, 1 << (size * 16 - 1).bit_length()))
        publisher = node.publisher("bench", ring_capacity=capacity, timeout=TIMEOUT)
        print(node.local_addr, flush=True)
        publisher.wait_for_subscribers(1, timeout=TIMEOUT)
        payload = np.zeros(size, dtype=np.uint8)
        publish = publisher.publish
        started = time.perf_counter()
        for _ in range(count):
            publish(payload)
        elapsed = time.perf_counter() - started
        publisher.flush(timeout=TIMEOUT)
        print(f"{count / elapsed:.0f}", flush=True)


def run(size: int, count: int) -> dict:
    child = subprocess.Popen(
        [sys.executable, __file__, "--publisher", str(size), str(count)], stdout=subprocess.PIPE, text=True
    )
    try:
        addr = child.stdout.readline().strip()
        with rdma_pubsub.Node(discovery=False) as node:
            subscriber = node.subscriber("bench", start="earliest", max_record_payload=16 << 20)
            subscriber.connect_wait(addr, timeout=TIMEOUT)
            received = checksum = 0
            started = None
            while received < count:
                message = subscriber.recv(timeout=TIMEOUT)
                assert message is not None, "a message within the timeout"
                if started is None:
                    started = time.perf_counter()
                array = np.frombuffer(message, dtype=np.uint8)  # a view, not a copy
                checksum += int(array[-1])
                del array
                received += 1
            elapsed = time.perf_counter() - started
            # Receiving on acks the last messages: the child's flush returns, it exits, the
            # stream ends.
            assert sum(1 for _ in subscriber) == 0
            published_rate = float(child.stdout.readline())
            assert child.wait(timeout=TIMEOUT) == 0
            # The first message starts the clock: count-1 intervals.
            return {"published/s": published_rate, "received/s": (count - 1) / elapsed,
                    "GB/s": (count - 1) * size / elapsed / 1e9}
    finally:
        child.kill()


def main() -> None:
    if sys.argv[1:2] == ["--publisher"]:
        publisher_process(int(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=200_000, help="64-byte messages")
    parser.add_argument("--large", type=int, default=2_000, help="1 MiB messages")
    args = parser.parse_args()
    small = run(64, args.small)
    print(f"64 B: published {small['published/s']:,.0f} msg/s, received {small['received/s']:,.0f} msg/s")
    large = run(1 << 20, args.large)
    print(f"1 MiB into numpy: received {large['received/s']:,.0f} msg/s = {large['GB/s']:.2f} GB/s "
          f"(published {large['published/s']:,.0f} msg/s)")


if __name__ == "__main__":
    main()
