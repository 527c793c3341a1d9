//! `pub` and `sub`: a publisher and a subscriber in separate processes (or hosts). The
//! subscriber finds the publishers of its topic by discovery (multicast group or unicast
//! peers) or connects where `--connect` says, checks every byte of every message (the payloads
//! are deterministic, derived from each message's topic) and fails if anything was damaged, or
//! lost while the publisher's policy promised no loss. Its topic may be a pattern
//! (`--topic 'sensors/**'`): it then reads every publisher of a topic the pattern includes,
//! found by discovery or listed by the node of `--connect`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use rdma_pubsub::{DiscoveryOptions, PolicyKind, PublisherInfo, Start, Subscription, SubscriptionEvent};

use crate::cli::{checksum_name, PubArgs, SubArgs};
use crate::{cli, payload, Fail};

/// How a node discovers, for people.
fn describe(options: &DiscoveryOptions, endpoint: Option<SocketAddr>) -> String {
    let endpoint = endpoint.map_or_else(|| "-".to_owned(), |e| e.to_string());
    if !options.is_enabled() {
        "off".into()
    } else if options.is_multicast() {
        format!("multicast group {} (endpoint {endpoint})", options.group_addr())
    } else if options.peer_list().is_empty() {
        format!("unicast at {endpoint} (answers the nodes that list it)")
    } else {
        let peers: Vec<String> = options.peer_list().iter().map(|p| p.to_string()).collect();
        format!("unicast at {endpoint} to {}", peers.join(","))
    }
}

/// `pubsub-demo pub`.
/// Messages between two clock reads (progress lines, idle checks) of `pub` and `sub`.
const CLOCK_EVERY: u64 = 1024;

pub fn publish(args: &PubArgs) -> Result<(), Fail> {
    let discovery = args.discovery.options();
    let node = args.fabric.node(args.bind, discovery.clone())?;
    let size = args.size as usize;
    let builder = node.publisher(&args.topic).policy(args.policy.policy()).ring_capacity(cli::ring_capacity_for(size));
    let publisher = args.checksum.apply(builder).create()?;
    println!(
        "publishing {:?} at {} on the {} fabric ({}): {} B messages, policy {}, checksum {}",
        args.topic,
        node.local_addr(),
        node.fabric().kind(),
        node.fabric().device_name(),
        size,
        args.policy.name(),
        checksum_name(publisher.checksum())
    );
    println!("  discovery: {}", describe(&discovery, node.discovery_addr()));
    if discovery.is_enabled() {
        println!(
            "  subscribe with: pubsub-demo sub --topic {}{} --fabric {}",
            args.topic,
            args.discovery.hint(node.discovery_addr()),
            node.fabric().kind()
        );
    }
    println!(
        "  connect with: pubsub-demo sub --connect {} --topic {} --fabric {}",
        node.local_addr(),
        args.topic,
        node.fabric().kind()
    );
    let _ = std::io::stdout().flush();
    if publisher.wait_for_subscribers(args.subscribers, Duration::from_secs(args.wait)).is_err() {
        return Err(Fail::Usage(format!(
            "{} of {} subscriber(s) connected within {} s: start `pubsub-demo sub --connect {} --topic {}` (or use --subscribers 0)",
            publisher.subscriber_count(),
            args.subscribers,
            args.wait,
            node.local_addr(),
            args.topic
        )));
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
        // The clock is read once per CLOCK_EVERY messages: at millions of messages a second,
        // a read per message would be a good part of what is measured.
        if seq % CLOCK_EVERY == 0 && last.0.elapsed() >= Duration::from_secs(1) {
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
        c.acks(),
        c.doorbells(),
        c.dropped(),
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
    /// Each publisher's stream (discovery may connect to several), by publisher id.
    streams: BTreeMap<u64, Stream>,
    dropped: bool,
}

/// One publisher's stream as the subscriber saw it.
struct Stream {
    /// The sequence expected next.
    next: u64,
    /// (final sequence, complete) once it ended.
    ended: Option<(u64, bool)>,
    /// The payload stream of its topic (`payload::stream_of`), from its first message.
    payload: Option<u32>,
}

impl Tally {
    fn stream(&mut self, publisher: &PublisherInfo) -> &mut Stream {
        self.streams.entry(publisher.id).or_insert(Stream { next: 1, ended: None, payload: None })
    }
}

/// `pubsub-demo sub`.
pub fn subscribe(args: &SubArgs) -> Result<(), Fail> {
    // With --connect, only that node: discovery would add the other publishers of the topic.
    let discovery = match args.connect {
        Some(_) => DiscoveryOptions::disabled(),
        None if args.discovery.no_discovery => {
            return Err(Fail::Usage(
                "without discovery (--no-discovery) give the publisher's node with --connect IP:PORT".into(),
            ))
        }
        None => args.discovery.options(),
    };
    let node = args.fabric.node(args.bind, discovery.clone())?;
    let builder = node.subscriber(&args.topic).start(Start::Earliest).auto_connect(args.connect.is_none());
    // A pattern connected to a node reads the topics that node lists, from the start.
    let mut sub = match args.connect {
        Some(addr) => builder.connect(addr),
        None => builder,
    }
    .create()?;
    let (info, how) = match args.connect {
        Some(addr) => (sub.connect_wait(addr, Duration::from_secs(10))?, String::new()),
        None => {
            println!(
                "looking for publishers of {:?} by discovery: {}",
                args.topic,
                describe(&discovery, node.discovery_addr())
            );
            let _ = std::io::stdout().flush();
            (find(&mut sub, args)?, ", found by discovery".to_owned())
        }
    };
    println!(
        "subscribed to {:?} at {} (publisher {:016x}, policy {:?}{how}) on the {} fabric",
        args.topic,
        info.addr,
        info.id,
        info.policy,
        node.fabric().kind()
    );
    let _ = std::io::stdout().flush();
    let mut t = Tally::default();
    t.stream(&info);
    let start = Instant::now();
    let mut last_message = Instant::now();
    let mut last = (start, 0u64);
    loop {
        let outcome = sub.recv_ref(Duration::from_millis(100));
        let quiet = !matches!(outcome, Ok(Some(_)));
        match outcome {
            Ok(Some(m)) => {
                // Each publisher's payloads derive from its topic (one of several, for a pattern).
                let s = t.stream(&m.publisher);
                let stream = match s.payload {
                    Some(stream) => stream,
                    None => {
                        if m.topic.as_str() != args.topic {
                            println!(
                                "  reading {} from publisher {:016x} at {}",
                                m.topic, m.publisher.id, m.publisher.addr
                            );
                        }
                        *s.payload.insert(payload::stream_of(m.topic.as_str()))
                    }
                };
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
                let s = t.stream(&m.publisher);
                let gap = m.seq.saturating_sub(s.next);
                s.next = m.seq + 1;
                t.missing += gap;
                t.delivered += 1;
                t.bytes += m.data.len() as u64;
            }
            Ok(None) => {}
            Err(rdma_pubsub::Error::Closed(_) | rdma_pubsub::Error::NotConnected { .. }) => {
                events(&mut sub, &mut t);
                break;
            }
            Err(e) => return Err(e.into()),
        }
        if args.count.is_some_and(|c| t.delivered >= c) {
            events(&mut sub, &mut t);
            break;
        }
        // Events, the idle check and the progress line: when nothing came, or once per
        // CLOCK_EVERY messages (not a clock read per message).
        if !quiet && t.delivered % CLOCK_EVERY != 0 {
            continue;
        }
        events(&mut sub, &mut t);
        if !quiet {
            last_message = Instant::now();
        } else if last_message.elapsed() > Duration::from_secs(args.idle) {
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
                c.reads(),
                c.empty_reads(),
                c.torn(),
            );
            last = (Instant::now(), t.delivered);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let unexplained = t.missing.saturating_sub(t.lost);
    let lossless = info.policy == PolicyKind::Block;
    let short = args.count.is_some_and(|c| t.delivered < c);
    let incomplete = t.streams.values().any(|s| s.ended.is_some_and(|(final_seq, _)| s.next <= final_seq));
    let unfinished = t.streams.values().any(|s| s.ended.is_none()) && args.count.is_none();
    let lost_badly = unexplained > 0 || (lossless && (t.lost > 0 || incomplete || t.dropped)) || short || unfinished;
    println!(
        "delivered {} messages ({:.1} MB) in {secs:.2} s; lost {} (reported) + {} (unexplained); damaged {}; stream {}",
        t.delivered,
        t.bytes as f64 / 1e6,
        t.lost,
        unexplained,
        t.damaged,
        t.streams
            .values()
            .map(|s| match s.ended {
                Some((f, true)) => format!("ended at {f}, complete"),
                Some((f, false)) => format!("ended at {f}, INCOMPLETE"),
                None if args.count.is_some() && !short => "not ended (count reached)".into(),
                None => "did not end".into(),
            })
            .collect::<Vec<_>>()
            .join("; ")
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

/// Waits (up to `--idle`) until discovery found a publisher of the topic and the
/// subscription connected to it.
fn find(sub: &mut Subscription, args: &SubArgs) -> Result<PublisherInfo, Fail> {
    let deadline = Instant::now() + Duration::from_secs(args.idle);
    loop {
        while let Some(event) = sub.try_event() {
            match event {
                SubscriptionEvent::Connected(info) => return Ok(info),
                SubscriptionEvent::Rejected { addr, topic, reason, detail } => {
                    println!("  the publisher of {topic} at {addr} refused: {reason:?} ({detail})")
                }
                SubscriptionEvent::Unreachable { addr, detail } => println!("  {addr} is unreachable: {detail}"),
                _ => {}
            }
        }
        if Instant::now() >= deadline {
            return Err(Fail::Usage(format!(
                "no publisher of {:?} found by discovery within {} s: start `pubsub-demo pub --topic {}{}`, or give --connect IP:PORT",
                args.topic,
                args.idle,
                args.topic,
                args.discovery.hint(None)
            )));
        }
        // A command-line tool polling for a person: 10 ms is prompt enough.
        thread::sleep(Duration::from_millis(10));
    }
}

/// Takes the subscription's events into the tally.
fn events(sub: &mut Subscription, t: &mut Tally) {
    while let Some(event) = sub.try_event() {
        match event {
            SubscriptionEvent::Connected(info) if !t.streams.contains_key(&info.id) => {
                t.stream(&info);
                println!("  also connected to publisher {:016x} at {} ({:?})", info.id, info.addr, info.policy);
            }
            SubscriptionEvent::Lost { count, .. } => t.lost += count,
            SubscriptionEvent::Ended { publisher, final_seq, complete } => {
                t.stream(&publisher).ended = Some((final_seq, complete))
            }
            SubscriptionEvent::Dropped { reason, .. } => {
                println!("  dropped by the publisher: {reason:?}");
                t.dropped = true;
            }
            SubscriptionEvent::Disconnected { publisher: Some(p), .. }
                if t.streams.get(&p.id).is_some_and(|s| s.ended.is_none()) =>
            {
                println!("  the publisher at {} disconnected", p.addr)
            }
            _ => {}
        }
    }
}
