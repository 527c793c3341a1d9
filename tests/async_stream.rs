//! `Subscription::stream` (feature `async`): messages arrive through an async `Stream` woken by
//! the completion channel's descriptor and by connection events, and it ends when the
//! publisher closes. Every wait is bounded by `tokio::time::timeout`.
#![cfg(feature = "async")]

#[path = "common/nodes.rs"]
mod nodes;

use std::future::{poll_fn, Future};
use std::net::Ipv4Addr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_core::Stream;
use rdma_pubsub::{
    DiscoveryOptions, Error, FabricKind, Message, MessageStream, MessageType, Node, Start, Subscription,
    SubscriptionEvent,
};

/// Bound of every wait for something that must happen.
const WAIT: Duration = Duration::from_secs(10);
/// How long a stream is driven to show that nothing arrives (and to let its feed park).
const QUIET: Duration = Duration::from_millis(300);

/// Two nodes without discovery (same-host setting under test), a publisher of `topic` on the
/// first and a subscription from its earliest message on the second, not connected yet.
fn pair(topic: &str) -> (Node, Node, Subscription) {
    let (a, b) = (nodes::soft_node_without_discovery(), nodes::soft_node_without_discovery());
    let sub = b.subscriber(topic).start(Start::Earliest).create().expect("subscribe");
    (a, b, sub)
}

/// Whether the stream woke its task, and the task to wake.
#[derive(Default)]
struct WakeFlag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.lock().unwrap().take() {
            task.wake();
        }
    }
}

/// The stream's next item, polling the stream only at first and when it woke the task itself:
/// the timer of the bound, firing, must not poll it (that poll would make the progress a
/// stream that is never woken lacks, and hide it).
async fn next_when_woken<T: ?Sized + MessageType>(
    stream: &mut MessageStream<'_, T>,
) -> Option<rdma_pubsub::Result<Message<T::Owned>>> {
    let flag = Arc::new(WakeFlag { woken: AtomicBool::new(true), ..Default::default() });
    let waker = Waker::from(flag.clone());
    poll_fn(|cx| {
        *flag.task.lock().unwrap() = Some(cx.waker().clone());
        if !flag.woken.swap(false, Ordering::SeqCst) {
            return Poll::Pending;
        }
        Pin::new(&mut *stream).poll_next(&mut Context::from_waker(&waker))
    })
    .await
}

/// Polls `fut` once.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await
}

/// The stream's next item, within [`WAIT`], woken by the stream alone.
async fn next<T: ?Sized + MessageType>(
    stream: &mut MessageStream<'_, T>,
) -> Option<rdma_pubsub::Result<Message<T::Owned>>> {
    tokio::time::timeout(WAIT, next_when_woken(stream)).await.expect("the stream woke with its next item in time")
}

/// The stream's next message, within [`WAIT`].
async fn next_message(stream: &mut MessageStream<'_>) -> Message {
    next(stream).await.expect("the stream went on").expect("a message")
}

#[tokio::test]
async fn messages_published_from_another_thread_arrive_through_the_stream_in_order() {
    const N: u64 = 200;
    let (a, _b, mut sub) = pair("async-thread");
    let publisher = a.publisher("async-thread").create().expect("publisher");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    let mut stream = sub.stream();
    // Pending before anything is published: the first message has to wake it.
    let (first, producer) = {
        let mut first = pin!(next_when_woken(&mut stream));
        assert!(poll_once(&mut first).await.is_pending(), "an item before anything was published");
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                publisher.publish(&i.to_le_bytes()).expect("publish");
            }
            publisher
        });
        (tokio::time::timeout(WAIT, first).await.expect("woken by the first message"), producer)
    };
    let m = first.expect("the stream went on").expect("a message");
    assert_eq!((m.seq, m.data.as_slice()), (1, &0u64.to_le_bytes()[..]));
    for i in 1..N {
        let m = next_message(&mut stream).await;
        assert_eq!((m.seq, m.data.as_slice()), (i + 1, &i.to_le_bytes()[..]), "message {i}");
    }
    // The subscription goes first, so that the publisher's close does not linger for it.
    drop(stream);
    drop(sub);
    drop(producer.join().expect("the producer thread"));
}

#[tokio::test]
async fn the_stream_ends_after_the_publisher_closes() {
    let (a, _b, mut sub) = pair("async-end");
    let publisher = a.publisher("async-end").create().expect("publisher");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    for i in 0..3u8 {
        publisher.publish(&[i]).expect("publish");
    }
    let closer = std::thread::spawn(move || drop(publisher));
    let mut stream = sub.stream();
    for i in 0..3u8 {
        assert_eq!(next_message(&mut stream).await.data, [i]);
    }
    assert!(next(&mut stream).await.is_none(), "the stream ends once the only publisher has closed");
    assert!(next(&mut stream).await.is_none(), "and stays ended");
    closer.join().expect("the closing thread");
}

#[tokio::test]
async fn events_are_read_while_streaming_and_an_end_after_a_loss_is_reported() {
    let (a, _b, mut sub) = pair("async-events");
    let publisher = a.publisher("async-events").linger(Duration::ZERO).create().expect("publisher");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    let mut stream = sub.stream();
    assert!(
        matches!(stream.try_event(), Some(SubscriptionEvent::Connected(_))),
        "the connection, seen while streaming"
    );
    for i in 0..3u8 {
        publisher.publish(&[i]).expect("publish");
    }
    // Closed at once: what the stream did not READ yet is reported lost, never dropped silently.
    drop(publisher);
    let mut delivered = 0;
    while let Some(item) = next(&mut stream).await {
        item.expect("a message");
        delivered += 1;
    }
    let events: Vec<_> = std::iter::from_fn(|| stream.try_event()).collect();
    let lost: u64 = events.iter().map(|e| if let SubscriptionEvent::Lost { count, .. } = e { *count } else { 0 }).sum();
    assert_eq!(delivered + lost, 3, "{events:?}");
    assert!(events.iter().any(|e| matches!(e, SubscriptionEvent::Ended { final_seq: 3, .. })), "{events:?}");
}

#[tokio::test]
async fn a_refusal_is_yielded_by_the_stream_then_it_ends() {
    let (a, _b, mut sub) = pair("async-refused");
    let right = rdma_pubsub::Secret::new(vec![1; 32]).expect("secret");
    let _publisher = a.publisher("async-refused").credential(right).create().expect("publisher");
    sub.connect(a.local_addr()).expect("connect");
    let mut stream = sub.stream();
    let item = next(&mut stream).await;
    assert!(
        matches!(item, Some(Err(Error::Rejected { reason: rdma_pubsub::RejectCode::Unauthorized, .. }))),
        "{item:?}"
    );
    assert!(next(&mut stream).await.is_none(), "then it ends");
    assert!(matches!(stream.try_event(), Some(SubscriptionEvent::Rejected { .. })), "and the event says so too");
}

#[tokio::test]
async fn a_pending_stream_is_woken_by_a_message_published_later() {
    let (a, _b, mut sub) = pair("async-later");
    let publisher = a.publisher("async-later").create().expect("publisher");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    let mut stream = sub.stream();
    // Driven with nothing to read: its feed READs the empty ring, asks for a doorbell and parks.
    let quiet = next_when_woken(&mut stream);
    assert!(tokio::time::timeout(QUIET, quiet).await.is_err(), "an item with nothing published");
    let (later, producer) = {
        let mut later = pin!(next_when_woken(&mut stream));
        assert!(poll_once(&mut later).await.is_pending(), "an item before anything was published");
        let producer = std::thread::spawn(move || {
            publisher.publish(b"later").expect("publish");
            publisher
        });
        (tokio::time::timeout(WAIT, later).await.expect("woken by the message"), producer)
    };
    assert_eq!(later.expect("the stream went on").expect("a message").data, b"later");
    drop(stream);
    drop(sub);
    drop(producer.join().expect("the producer thread"));
}

/// A multicast group and port of this test process's own (distinct from other test binaries').
fn discovery_domain() -> DiscoveryOptions {
    let pid = std::process::id();
    let port = 20000 + ((pid % 700) as u16 * 16 + 15) % 12000;
    let group = Ipv4Addr::new(239, 194, (pid % 251) as u8, 1);
    DiscoveryOptions::default().group(group).port(port)
}

#[tokio::test]
async fn a_pending_stream_connects_to_a_publisher_discovery_finds_later() {
    let node = || Node::builder().fabric(FabricKind::Soft).discovery(discovery_domain()).build().expect("node");
    let b = node();
    let mut sub = b.subscriber("async-discovered").start(Start::Earliest).create().expect("subscribe");
    let mut stream = sub.stream();
    // Pending with no publisher anywhere: only a connection event can wake it.
    let (found, a, publisher) = {
        let mut found = pin!(next_when_woken(&mut stream));
        assert!(poll_once(&mut found).await.is_pending(), "an item with no publisher");
        let a = node();
        let publisher = a.publisher("async-discovered").create().expect("publisher");
        publisher.publish(b"found").expect("publish");
        (tokio::time::timeout(WAIT, found).await.expect("woken by discovery's connection"), a, publisher)
    };
    let m = found.expect("the stream went on").expect("a message");
    assert_eq!((m.seq, m.data.as_slice(), m.publisher.addr), (1, &b"found"[..], a.local_addr()));
    drop(stream);
    drop(sub);
    drop(publisher);
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Quote {
    symbol: String,
    price: f64,
}

#[tokio::test]
async fn a_typed_stream_yields_values_and_goes_on_after_one_that_does_not_decode() {
    let (a, b, c) = (
        nodes::soft_node_without_discovery(),
        nodes::soft_node_without_discovery(),
        nodes::soft_node_without_discovery(),
    );
    let typed = a.publisher("async-typed").typed::<Quote>().create().expect("typed publisher");
    let raw = b.publisher("async-typed").create().expect("raw publisher");
    let mut quotes = c
        .subscriber("async-typed")
        .start(Start::Earliest)
        .connect(a.local_addr())
        .connect(b.local_addr())
        .typed::<Quote>()
        .create()
        .expect("subscribe");
    raw.publish(b"\xff not a quote").expect("publish");
    let mut stream = quotes.stream();
    assert!(matches!(next(&mut stream).await, Some(Err(Error::Decode { .. }))), "the raw bytes are no Quote");
    // Published once the decode error was yielded: the same stream goes on to it.
    let quote = Quote { symbol: "RDMA".into(), price: 42.5 };
    typed.publish(&quote).expect("publish");
    let m = next(&mut stream).await.expect("the stream went on after the decode error").expect("a Quote");
    assert_eq!((m.data, m.publisher.id), (quote, typed.id()));
    drop(stream);
    drop(quotes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_streams_in_a_task_of_its_own_on_a_multi_threaded_runtime() {
    let (a, _b, mut sub) = pair("async-spawned");
    let publisher = a.publisher("async-spawned").create().expect("publisher");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    // The subscription moves into the task (it is `Send`), and its stream lives there.
    let reader = tokio::spawn(async move {
        let mut stream = sub.stream();
        let mut got = Vec::new();
        while let Some(m) = next(&mut stream).await {
            got.push(m.expect("a message").data);
        }
        got
    });
    for i in 0..3u8 {
        publisher.publish(&[i]).expect("publish");
    }
    // Closing waits for the subscriber's acks: not on a worker of the runtime.
    let closer = tokio::task::spawn_blocking(move || drop(publisher));
    let got = tokio::time::timeout(WAIT, reader).await.expect("the task ended").expect("the task");
    closer.await.expect("the closing thread");
    assert_eq!(got, [[0], [1], [2]], "every message, then the end");
}

#[test]
fn a_stream_polled_outside_a_tokio_runtime_yields_an_error_then_ends() {
    let (a, _b, mut sub) = pair("async-no-runtime");
    let publisher = a.publisher("async-no-runtime").create().expect("publisher");
    sub.connect_wait(a.local_addr(), WAIT).expect("connect");
    let mut stream = sub.stream();
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut stream).poll_next(&mut cx) {
        Poll::Ready(Some(Err(Error::Fabric(e)))) => assert!(e.to_string().contains("tokio"), "{e}"),
        other => panic!("outside a runtime: {other:?}"),
    }
    assert!(matches!(Pin::new(&mut stream).poll_next(&mut cx), Poll::Ready(None)));
    drop(stream);
    drop(sub);
    drop(publisher);
}
