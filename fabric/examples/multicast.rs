//! Unreliable-datagram multicast: one sender and N receivers on a group.
//!
//! Every endpoint joins the group. Each receiver announces itself on the group (`READY`,
//! repeated until data flows, since the sender may start later); the sender waits until it has
//! heard N distinct receivers, then sends M numbered datagrams. Each receiver must get all M
//! (loopback loses nothing, but every wait is bounded) with the right payload.
//!
//! ```text
//! multicast --receive -N 3 [--group 239.255.77.1 --port 7475]
//! multicast --send -N 3 -m 100
//! multicast --both --fabric soft -N 3 -m 100
//! ```

mod common;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;
use common::*;
use rdma_fabric::{self as fabric, Fabric, FabricConfig, FabricKind, UdEndpoint, UdInit};

const READY: &[u8; 4] = b"MCRY";
const DATA: &[u8; 4] = b"MCDT";
/// Header of a data datagram: magic, session, sequence number, total count.
const DATA_HEADER: usize = 16;

/// UD multicast: a sender and N receiver threads, each receiver with its own endpoint.
#[derive(Parser, Debug)]
struct Args {
    /// Fabric provider: soft, verbs or auto.
    #[arg(long, default_value = "auto")]
    fabric: FabricKind,
    /// Interface address multicast is sent and received on (keep it on loopback).
    #[arg(long, default_value = "127.0.0.1")]
    bind: Ipv4Addr,
    /// Multicast group.
    #[arg(long, default_value = "239.255.77.1")]
    group: Ipv4Addr,
    /// Port of the group (`--both` without it picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// Run the receivers only.
    #[arg(long, conflicts_with_all = ["send", "both"])]
    receive: bool,
    /// Run the sender only.
    #[arg(long, conflicts_with = "both")]
    send: bool,
    /// Run the sender and the receivers in this process.
    #[arg(long)]
    both: bool,
    /// Number of receivers.
    #[arg(short = 'N', long, default_value_t = 3)]
    receivers: u32,
    /// Number of datagrams.
    #[arg(short = 'm', long, default_value_t = 100)]
    count: u32,
    /// Payload bytes per datagram (at most the UD MTU, header included).
    #[arg(short = 'z', long, default_value_t = 256)]
    size: usize,
    /// Bound of every wait, in seconds.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

const DEFAULT_PORT: u16 = 7475;

fn main() -> ExitCode {
    init_logging();
    finish(run(Args::parse()))
}

fn run(args: Args) -> Res<()> {
    if !args.group.is_multicast() {
        return Err(err(format!("{} is not a multicast group", args.group)));
    }
    if args.receivers == 0 || args.count == 0 {
        return Err(err("-N and -m must be at least 1"));
    }
    if args.size < DATA_HEADER {
        return Err(err(format!("-z must be at least {DATA_HEADER} bytes")));
    }
    let port = match (args.port, args.both) {
        (Some(port), _) => port,
        (None, true) => free_udp_port(args.bind)?,
        (None, false) => DEFAULT_PORT,
    };
    let config = FabricConfig { kind: args.fabric, bind: IpAddr::V4(args.bind), ..FabricConfig::default() };
    let init = UdInit { interface: args.bind, port, unicast_port: 0, recv_depth: (args.count * 2).clamp(64, 4096) };
    let job = Job {
        group: args.group,
        receivers: args.receivers,
        count: args.count,
        size: args.size,
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    println!(
        "multicast: group {}:{port} on {}, {} receivers, {} datagrams of {} bytes",
        job.group, args.bind, job.receivers, job.count, job.size
    );

    if args.send {
        let fabric = fabric::open(&config)?;
        return sender(&fabric, &init, &job);
    }
    if !args.receive && !args.both {
        return Err(err("choose a role: --receive, --send or --both"));
    }
    // Receivers (and, under --both, the sender) on their own threads; the receivers share
    // this process's fabric (the sender opens its own) but each has its own endpoint.
    let fabric = fabric::open(&config)?;
    let joined = Arc::new(Barrier::new(args.receivers as usize + usize::from(args.both)));
    let mut threads = Vec::new();
    for id in 0..args.receivers {
        let (fabric, init, job, joined) = (fabric.clone(), init.clone(), job.clone(), joined.clone());
        threads.push(spawn(&format!("receiver-{id}"), move || receiver(id, &fabric, &init, &job, &joined))?);
    }
    let sender_thread = if args.both {
        let (config, init, job, joined) = (config.clone(), init.clone(), job.clone(), joined.clone());
        Some(spawn("sender", move || {
            let fabric = fabric::open(&config);
            // Release the receivers even if the sender cannot start, then report why.
            joined.wait();
            sender(&fabric?, &init, &job)
        })?)
    } else {
        None
    };
    let mut first_error = None;
    for (id, t) in threads.into_iter().enumerate() {
        if let Err(e) = join(t) {
            first_error.get_or_insert(err(format!("receiver {id}: {e}")));
        }
    }
    if let Some(t) = sender_thread {
        if let Err(e) = join(t) {
            first_error = Some(err(format!("sender: {e}")));
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => {
            println!("multicast: all {} receivers got all {} datagrams", job.receivers, job.count);
            Ok(())
        }
    }
}

/// What to send and check.
#[derive(Debug, Clone)]
struct Job {
    group: Ipv4Addr,
    receivers: u32,
    count: u32,
    size: usize,
    timeout: Duration,
}

fn free_udp_port(ip: Ipv4Addr) -> Res<u16> {
    Ok(std::net::UdpSocket::bind((ip, 0))?.local_addr()?.port())
}

fn open_endpoint(fabric: &Fabric, init: &UdInit, job: &Job) -> Res<UdEndpoint> {
    let pd = fabric.alloc_pd()?;
    let ep = fabric.create_ud(&pd, init)?;
    if job.size > ep.mtu() {
        return Err(err(format!("-z {} exceeds the UD MTU of {}", job.size, ep.mtu())));
    }
    ep.join(job.group)?;
    Ok(ep)
}

fn data_datagram(session: u32, seq: u32, job: &Job) -> Vec<u8> {
    let mut d = Vec::with_capacity(job.size);
    d.extend_from_slice(DATA);
    d.extend_from_slice(&session.to_le_bytes());
    d.extend_from_slice(&seq.to_le_bytes());
    d.extend_from_slice(&job.count.to_le_bytes());
    d.extend(pattern(session ^ seq, job.size - DATA_HEADER));
    d
}

/// Waits for N distinct receivers to announce themselves, then sends the datagrams.
fn sender(fabric: &Fabric, init: &UdInit, job: &Job) -> Res<()> {
    let ep = open_endpoint(fabric, init, job)?;
    let deadline = Instant::now() + job.timeout;
    let mut ready = HashSet::new();
    while ready.len() < job.receivers as usize {
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
        let left = left
            .ok_or_else(|| err(format!("only {} of {} receivers announced themselves", ready.len(), job.receivers)))?;
        if let Some(dgram) = ep.recv(left)? {
            if dgram.data.len() == 8 && dgram.data[..4] == READY[..] {
                ready.insert((dgram.from, dgram.data[4..8].to_vec()));
            }
        }
    }
    println!("sender: {} receivers ready", ready.len());
    let session: u32 = rand::random();
    for seq in 0..job.count {
        ep.send_to(job.group, &data_datagram(session, seq, job))?;
    }
    println!("sender: sent {} datagrams to {}", job.count, job.group);
    Ok(())
}

/// Joins, announces itself until data arrives, and checks it gets every datagram once.
fn receiver(id: u32, fabric: &Fabric, init: &UdInit, job: &Job, joined: &Barrier) -> Res<()> {
    let ep = open_endpoint(fabric, init, job);
    joined.wait();
    let ep = ep?;
    let mut ready = READY.to_vec();
    ready.extend_from_slice(&(id ^ rand::random::<u32>()).to_le_bytes());
    let deadline = Instant::now() + job.timeout;
    let mut session = None;
    let mut seen = vec![false; job.count as usize];
    let mut got = 0u32;
    let mut next_announce = Instant::now();
    while got < job.count {
        let now = Instant::now();
        if now >= deadline {
            return Err(err(format!("got {got} of {} datagrams before the timeout", job.count)));
        }
        if session.is_none() && now >= next_announce {
            ep.send_to(job.group, &ready)?;
            next_announce = now + Duration::from_millis(100);
        }
        let wait = if session.is_none() { next_announce.min(deadline) } else { deadline };
        let Some(dgram) = ep.recv(wait.saturating_duration_since(now))? else { continue };
        let d = &dgram.data;
        if d.len() < DATA_HEADER || d[..4] != DATA[..] {
            continue; // an announcement of a receiver
        }
        let word = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        let (s, seq, total) = (word(4), word(8), word(12));
        if *session.get_or_insert(s) != s {
            continue; // a datagram of another run
        }
        if total != job.count || seq >= job.count {
            return Err(err(format!("datagram {seq} of {total} does not fit a run of {}", job.count)));
        }
        if d.len() != job.size {
            return Err(err(format!("datagram {seq} has {} bytes, expected {}", d.len(), job.size)));
        }
        check_pattern(s ^ seq, &d[DATA_HEADER..]).map_err(|e| err(format!("datagram {seq}: {e}")))?;
        if std::mem::replace(&mut seen[seq as usize], true) {
            return Err(err(format!("datagram {seq} arrived twice")));
        }
        got += 1;
    }
    println!("receiver {id}: got all {} datagrams, payloads verified", job.count);
    Ok(())
}
