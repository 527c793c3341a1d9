"""Streams numpy arrays without copies on either side: the publisher writes each array
straight into its ring through a loan, the subscriber views each one where the READ put it.

    python numpy_loan.py [--frames 100] [--shape 256 256]

Both ends run in this process (two nodes connected by address) to keep the example whole.
"""

import argparse
import threading

import numpy as np

import rdma_pubsub


def publish(publisher: rdma_pubsub.Publisher, frames: int, shape: tuple) -> None:
    size = int(np.prod(shape)) * np.dtype(np.float32).itemsize
    for i in range(frames):
        # The loan is ring memory: the array is computed into it, then sent as it is.
        with publisher.loan(size) as loan:
            frame = np.frombuffer(loan, dtype=np.float32).reshape(shape)
            frame[...] = i
            frame[0, 0] = -i
            del frame  # views must be gone when the loan is sent (at the end of the block)
    publisher.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--shape", type=int, nargs=2, default=[256, 256])
    args = parser.parse_args()
    shape = tuple(args.shape)
    with rdma_pubsub.Node(discovery=False) as a, rdma_pubsub.Node(discovery=False) as b:
        publisher = a.publisher("demo/frames", ring_capacity=8 << 20)
        subscriber = b.subscriber("demo/frames", start="earliest")
        subscriber.connect_wait(a.local_addr)
        sender = threading.Thread(target=publish, args=(publisher, args.frames, shape))
        sender.start()
        total = 0.0
        for message in subscriber:
            # A read-only view of the READ buffer: no copy. Let it go before the next receive.
            frame = np.frombuffer(message, dtype=np.float32).reshape(shape)
            assert frame[0, 0] == -frame[1, 1]
            total += float(frame[1, 1])
            del frame
        sender.join()
        print(f"{args.frames} frames of {shape}, sum of their values {total:.0f}")


if __name__ == "__main__":
    main()
