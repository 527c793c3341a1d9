"""Subscribes to a topic and prints what arrives, until its publishers have gone (or Ctrl-C).

    python sub.py [--topic demo/counter] [--asyncio]

Discovery finds the publishers (pub.py); ``--asyncio`` receives with ``async for``.
"""

import argparse
import asyncio

import rdma_pubsub


def show(message: rdma_pubsub.Message) -> None:
    # The payload is lent from the READ buffer: decode it (a copy) before the next receive.
    print(f"#{message.seq} from {message.publisher.addr}: {bytes(message).decode(errors='replace')}")


async def receive_async(subscriber: rdma_pubsub.Subscriber) -> None:
    async for message in subscriber:
        show(message)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", default="demo/counter")
    parser.add_argument("--asyncio", action="store_true")
    args = parser.parse_args()
    with rdma_pubsub.Node() as node, node.subscriber(args.topic) as subscriber:
        print(f"waiting for {args.topic!r}")
        try:
            if args.asyncio:
                asyncio.run(receive_async(subscriber))
            else:
                for message in subscriber:
                    show(message)
        except KeyboardInterrupt:
            pass
        for event in subscriber.events():
            print(event)


if __name__ == "__main__":
    main()
