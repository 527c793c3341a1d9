//! `pub` and `sub`: a publisher and a subscriber in separate processes (or hosts). The
//! subscriber checks every byte of every message (the payloads are deterministic) and fails if
//! anything was damaged, or lost while the publisher's policy promised no loss.

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::protocol::Policy as WirePolicy;
use rdma_pubsub::{PublisherOptions, Start, SubscriptionEvent, SubscriptionOptions};

use crate::cli::{PubArgs, SubArgs};
use crate::{payload, Fail};

/// `pubsub-demo pub`.
pub fn publish(args: &PubArgs) -> Result<(), Fail> {
    let node = args.fabric.node(args.bind)?;
    let size = args.size as usize;
    let ring_capacity = (size * 8).next_power_of_two().clamp(1 << 20, 64 << 20);
    let publisher = node.publisher_with(
        &args.topic,
        PublisherOptions { policy: args.policy.policy(), ring_capacity, ..Default::default() },
    )?;
    println!(
        "publishing {:?} at {} on the {} fabric ({}): {} B messages, policy {}",
        args.topic,
        node.local_addr(),
        node.fabric().kind(),
        node.fabric().device_name(),
        size,
        args.policy.name()
    );
    println!(
        "  connect with: pubsub-demo sub --connect {} --topic {} --fabric {}",
        node.local_addr(),
        args.topic,
        node.fabric().kind()
    );
    let _ = std::io::stdout().flush();
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    while publisher.subscriber_count() < args.subscribers {
        if Instant::now() >= deadline {
            return Err(Fail::Usage(format!(
                "{} of {} subscriber(s) connected within {} s: start `pubsub-demo sub --connect {}` (or use --subscribers 0)",
                publisher.subscriber_count(),
                args.subscribers,
                args.wait,
                node.local_addr()
            )));
        }
        thread::sleep(Duration::from_millis(10));
    }
    let stream = payload::stream_of(&args.topic);
    let mut buf = vec![0u8; size];
    let start = Instant::now();
    let mut last = (start, 0u64);
    let mut seq = 1u64;
    while args.count == 0 || seq <= args.count {
        if args.rate > 0 {
            let due = start + Duration::from_secs_f64((seq - 1) as f64 / args.rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
        }
        payload::fill(&mut buf, stream, seq, 0);
        let got = publisher.publish(&buf)?;
        if got != seq {
            return Err(Fail::Usage(format!("the publisher numbered message {seq} as {got}")));
        }
        if last.0.elapsed() >= Duration::from_secs(1) {
            let rate = (seq - last.1) as f64 / last.0.elapsed().as_secs_f64();
            println!(
                "  [{:>5.1}s] published {seq:>10}  {:>9.0} msg/s {:>8.1} MB/s  subscribers {}",
                start.elapsed().as_secs_f64(),
                rate,
                rate * size as f64 / 1e6,
                publisher.subscriber_count()
            );
            last = (Instant::now(), seq);
        }
        seq += 1;
    }
    publisher.flush(Duration::from_secs(10))?;
    let secs = start.elapsed().as_secs_f64();
    let published = seq - 1;
    let c = publisher.counters();
    println!(
        "published {published} messages ({:.1} MB) in {secs:.2} s: {:.0} msg/s, {:.1} MB/s; acks {}, doorbells {}, dropped subscribers {}",
        (published * size as u64) as f64 / 1e6,
        published as f64 / secs,
        (published * size as u64) as f64 / secs / 1e6,
        c.acks.load(std::sync::atomic::Ordering::Relaxed),
        c.doorbells.load(std::sync::atomic::Ordering::Relaxed),
        c.dropped.load(std::sync::atomic::Ordering::Relaxed),
    );
    // Dropping the publisher tells the subscribers the stream ended.
    Ok(())
}

/// What the subscriber saw.
#[derive(Default)]
struct Tally {
    delivered: u64,
    bytes: u64,
    /// Reported lost by the publisher (Overwrite).
    lost: u64,
    /// Sequence gaps not explained by a Lost report.
    missing: u64,
    damaged: u64,
    first_damage: Option<String>,
    ended: Option<(u64, bool)>,
    dropped: bool,
}

/// `pubsub-demo sub`.
pub fn subscribe(args: &SubArgs) -> Result<(), Fail> {
    let node = args.fabric.node(args.bind)?;
    let mut sub =
        node.subscribe_with(&args.topic, SubscriptionOptions { start: Start::Earliest, ..Default::default() })?;
    let info = sub.connect_wait(args.connect, Duration::from_secs(10))?;
    println!(
        "subscribed to {:?} at {} (publisher {:016x}, policy {:?}) on the {} fabric",
        args.topic,
        args.connect,
        info.id,
        info.policy,
        node.fabric().kind()
    );
    let _ = std::io::stdout().flush();
    let stream = payload::stream_of(&args.topic);
    let mut t = Tally::default();
    let mut next = 1u64;
    let start = Instant::now();
    let mut last_message = Instant::now();
    let mut last = (start, 0u64);
    loop {
        let outcome = sub.recv_ref(Duration::from_millis(100));
        match outcome {
            Ok(Some(m)) => {
                last_message = Instant::now();
                let damage = match payload::check(m.data, stream) {
                    Ok(h) if h.seq != m.seq => Some(format!("message {} carries sequence {}", m.seq, h.seq)),
                    Ok(_) => match args.size {
                        Some(size) if m.data.len() as u64 != size => {
                            Some(format!("message {} has {} bytes, expected {size}", m.seq, m.data.len()))
                        }
                        _ => None,
                    },
                    Err(d) => Some(format!("message {}: {d:?}", m.seq)),
                };
                if let Some(d) = damage {
                    t.damaged += 1;
                    t.first_damage.get_or_insert(d);
                }
                if m.seq > next {
                    t.missing += m.seq - next;
                }
                next = m.seq + 1;
                t.delivered += 1;
                t.bytes += m.data.len() as u64;
            }
            Ok(None) => {}
            Err(rdma_pubsub::Error::Closed(_)) => {
                events(&mut sub, &mut t);
                break;
            }
            Err(e) => return Err(e.into()),
        }
        events(&mut sub, &mut t);
        if args.count.is_some_and(|c| t.delivered >= c) {
            break;
        }
        if last_message.elapsed() > Duration::from_secs(args.idle) {
            println!("  no message for {} s: stopping", args.idle);
            break;
        }
        if last.0.elapsed() >= Duration::from_secs(1) {
            let secs = last.0.elapsed().as_secs_f64();
            let c = sub.counters();
            println!(
                "  [{:>5.1}s] delivered {:>10}  {:>9.0} msg/s  reads {} empty {} torn {}",
                start.elapsed().as_secs_f64(),
                t.delivered,
                (t.delivered - last.1) as f64 / secs,
                c.reads.load(std::sync::atomic::Ordering::Relaxed),
                c.empty_reads.load(std::sync::atomic::Ordering::Relaxed),
                c.torn.load(std::sync::atomic::Ordering::Relaxed),
            );
            last = (Instant::now(), t.delivered);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let unexplained = t.missing.saturating_sub(t.lost);
    let lossless = info.policy == WirePolicy::Block;
    let short = args.count.is_some_and(|c| t.delivered < c);
    let incomplete = t.ended.is_some_and(|(final_seq, _)| next <= final_seq);
    let unfinished = t.ended.is_none() && args.count.is_none();
    let lost_badly = unexplained > 0 || (lossless && (t.lost > 0 || incomplete || t.dropped)) || short || unfinished;
    println!(
        "delivered {} messages ({:.1} MB) in {secs:.2} s; lost {} (reported) + {} (unexplained); damaged {}; stream {}",
        t.delivered,
        t.bytes as f64 / 1e6,
        t.lost,
        unexplained,
        t.damaged,
        match t.ended {
            Some((f, true)) => format!("ended at {f}, complete"),
            Some((f, false)) => format!("ended at {f}, INCOMPLETE"),
            None if args.count.is_some() && !short => "not ended (count reached)".into(),
            None => "did not end".into(),
        }
    );
    if let Some(d) = &t.first_damage {
        println!("first damage: {d}");
    }
    if t.damaged > 0 || lost_badly {
        println!("FAIL");
        return Err(Fail::Check);
    }
    println!("ok: every message arrived intact");
    Ok(())
}

/// Takes the subscription's events into the tally.
fn events(sub: &mut rdma_pubsub::Subscription, t: &mut Tally) {
    while let Some(event) = sub.try_event() {
        match event {
            SubscriptionEvent::Lost { count, .. } => t.lost += count,
            SubscriptionEvent::Ended { final_seq, complete, .. } => t.ended = Some((final_seq, complete)),
            SubscriptionEvent::Dropped { reason, .. } => {
                println!("  dropped by the publisher: {reason:?}");
                t.dropped = true;
            }
            SubscriptionEvent::Disconnected { .. } if t.ended.is_none() => println!("  the publisher disconnected"),
            _ => {}
        }
    }
}
