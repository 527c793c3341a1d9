"""Publishes a counter on a topic once per interval; subscribers find it by discovery.

    python pub.py [--topic demo/counter] [--count 100] [--interval 0.1]

Run sub.py in another terminal (or on another host of the same network).
"""

import argparse
import time

import rdma_pubsub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", default="demo/counter")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    with rdma_pubsub.Node() as node, node.publisher(args.topic, policy="drop_slow", timeout=1.0) as publisher:
        print(f"publishing {args.topic!r} from {node.local_addr}")
        for i in range(args.count):
            seq = publisher.publish(f"message {i}".encode())
            print(f"sent #{seq}, {publisher.subscriber_count} subscriber(s)")
            time.sleep(args.interval)


if __name__ == "__main__":
    main()
