//! RDMA READ ping-pong, as the OpenFabrics "pubsub-rdma" example.
//!
//! The server registers `-z` bytes for remote read, fills them with a pattern, and accepts the
//! connection with the buffer's address, rkey, length and pattern seed in the private data. The
//! client READs the buffer `-n` times, verifies the pattern each time, and acknowledges each
//! READ with a SEND carrying its iteration number, which the server checks. Connection-manager
//! events are handled on their own thread; completions are taken with completion events (arm,
//! wait, poll), not by busy polling (`--spin-us` adds a short poll before arming). The client
//! prints READ latency statistics.
//!
//! ```text
//! rdma_read_pingpong --server [--port 7471] -z 4096
//! rdma_read_pingpong --client 127.0.0.1[:7471] -z 4096 -n 1000
//! rdma_read_pingpong --both --fabric soft -z 4096 -n 100
//! ```

mod common;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use common::*;
use hdrhistogram::Histogram;
use rdma_fabric::{Access, QpCaps, QpInit, SendOp, SendRequest, WcOpcode, RNR_RETRY_INFINITE};

const DEFAULT_PORT: u16 = 7471;
/// Acknowledgements the server keeps receives posted for.
const ACK_SLOTS: usize = 16;
const ACK_LEN: usize = 8;
const READ_WR: u64 = 1;
const ACK_WR: u64 = 2;

/// RDMA READ ping-pong with per-READ acknowledgements and latency statistics.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    net: NetArgs,
    /// Bytes per READ (the server's buffer size).
    #[arg(short = 'z', long, default_value_t = 4096)]
    size: u32,
    /// Iterations (client side).
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Microseconds the client polls its CQ before it arms and blocks (0: completion events only).
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
}

fn main() -> ExitCode {
    init_logging();
    finish(run(Args::parse()))
}

fn run(args: Args) -> Res<()> {
    if args.size == 0 || args.iters == 0 {
        return Err(err("-z and -n must be at least 1"));
    }
    let role = args.net.role(DEFAULT_PORT)?;
    let (net_s, net_c) = (args.net.clone(), args.net.clone());
    let (size, iters, spin) = (args.size, args.iters, Duration::from_micros(args.spin_us));
    run_roles(
        role,
        args.net.timeout(),
        Box::new(move |addr, ready| server(&net_s, size, addr, ready)),
        Box::new(move |addr| client(&net_c, size, iters, spin, addr)),
    )
}

fn server(net: &NetArgs, size: u32, addr: SocketAddr, mut ready: Ready) -> Res<()> {
    let timeout = net.timeout();
    let fabric = net.open()?;
    let pd = fabric.alloc_pd()?;
    let send_cq = fabric.create_cq(16)?;
    let recv_cq = fabric.create_cq(ACK_SLOTS as u32 * 2)?;
    let exposed = pd.register(size as usize, Access::REMOTE_READ)?;
    let seed: u32 = rand::random();
    exposed.buffer().write(0, &pattern(seed, size as usize))?;
    let acks = pd.register(ACK_SLOTS * ACK_LEN, Access::LOCAL_WRITE)?;

    let cm = CmThread::start("server-cm", fabric.create_event_channel()?)?;
    let listener = cm.channel().listen(addr, 8)?;
    ready.announce(listener.local_addr());

    let request = wait_connect_request(&cm, timeout)?;
    let peer = request.peer_addr();
    let hello = RegionInfo::decode(request.private_data())?;
    let iters = hello.extra;
    let info = RegionInfo { remote: exposed.remote(), len: size, extra: seed };
    let mut init = QpInit::new(&pd, &send_cq);
    init.recv_cq = &recv_cq;
    init.caps = QpCaps { max_recv_wr: ACK_SLOTS as u32, ..QpCaps::default() };
    let qp = request.accept(&init, &info.encode())?;
    for slot in 0..ACK_SLOTS {
        qp.post_recv(slot as u64, &[acks.sge(slot * ACK_LEN, ACK_LEN)])?;
    }
    wait_established(&cm, qp.conn_id(), timeout)?;
    println!(
        "server: {peer} connected; exposing {size} bytes at {:#x} rkey {:#x}; expecting {iters} READs",
        info.remote.addr, info.remote.rkey
    );

    let mut completions = Completions::new(recv_cq, timeout);
    for i in 0..u64::from(iters) {
        let wc = completions.next("acknowledgement")?;
        if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != ACK_LEN {
            return Err(err(format!("unexpected completion {:?} of {} bytes", wc.opcode, wc.byte_len)));
        }
        let slot = usize::try_from(wc.wr_id).ok().filter(|s| *s < ACK_SLOTS).ok_or_else(|| err("bad wr_id"))?;
        let mut ack = [0u8; ACK_LEN];
        acks.buffer().read(slot * ACK_LEN, &mut ack)?;
        let got = u64::from_le_bytes(ack);
        if got != i {
            return Err(err(format!("acknowledgement {got} arrived where {i} was expected")));
        }
        // Repost only for acknowledgements still to come: after the last one the client may
        // already have disconnected.
        if i + (ACK_SLOTS as u64) < u64::from(iters) {
            qp.post_recv(wc.wr_id, &[acks.sge(slot * ACK_LEN, ACK_LEN)])?;
        }
    }
    println!("server: received {iters} acknowledgements in order");
    wait_disconnected(&cm, qp.conn_id(), timeout)?;
    println!("server: client disconnected");
    Ok(())
}

fn client(net: &NetArgs, size: u32, iters: u32, spin: Duration, addr: SocketAddr) -> Res<()> {
    let timeout = net.timeout();
    let fabric = net.open()?;
    let pd = fabric.alloc_pd()?;
    let cq = fabric.create_cq(16)?;
    let dest = pd.register(size as usize, Access::LOCAL_WRITE)?;
    let ack = pd.register(ACK_LEN, Access::NONE)?;

    let cm = CmThread::start("client-cm", fabric.create_event_channel()?)?;
    let mut init = QpInit::new(&pd, &cq);
    // The server posts its receives right after accepting: retry a SEND until they are there.
    init.rnr_retry = RNR_RETRY_INFINITE;
    let hello = RegionInfo { remote: dest.remote(), len: size, extra: iters };
    let qp = cm.channel().connect(addr, &init, &hello.encode(), timeout)?;
    let server = RegionInfo::decode(&wait_established(&cm, qp.conn_id(), timeout)?)?;
    if server.len < size {
        return Err(err(format!("the server exposes {} bytes, fewer than -z {size}", server.len)));
    }
    println!(
        "client: connected to {addr}; server buffer {:#x} rkey {:#x} ({} bytes)",
        server.remote.addr, server.remote.rkey, server.len
    );

    let mut completions = Completions::new(cq, timeout).with_spin(spin);
    let mut read_lat = Histogram::<u64>::new(3)?;
    let mut round_lat = Histogram::<u64>::new(3)?;
    let mut data = vec![0u8; size as usize];
    let read_sges = [dest.sge(0, size as usize)];
    let ack_sges = [ack.sge(0, ACK_LEN)];
    let start = Instant::now();
    for i in 0..u64::from(iters) {
        let t0 = Instant::now();
        qp.post_send(&SendRequest::new(READ_WR, SendOp::RdmaRead(server.remote), &read_sges))?;
        completions.expect(WcOpcode::RdmaRead, READ_WR, "RDMA READ")?;
        let t_read = t0.elapsed();
        dest.buffer().read(0, &mut data)?;
        check_pattern(server.extra, &data).map_err(|e| err(format!("READ {i}: {e}")))?;
        ack.buffer().write(0, &i.to_le_bytes())?;
        qp.post_send(&SendRequest::new(ACK_WR, SendOp::Send, &ack_sges))?;
        completions.expect(WcOpcode::Send, ACK_WR, "acknowledgement SEND")?;
        read_lat.record(t_read.as_nanos() as u64)?;
        round_lat.record(t0.elapsed().as_nanos() as u64)?;
        // Clear the destination so the next READ is verified afresh.
        dest.buffer().fill(0, size as usize, 0)?;
    }
    let elapsed = start.elapsed();
    qp.disconnect()?;
    println!("client: {iters} READs of {size} bytes verified and acknowledged");
    print_stats("READ latency", &read_lat);
    print_stats("READ+verify+ack", &round_lat);
    let bytes = u64::from(iters) * u64::from(size);
    println!("client: {:.1} MB/s over {:.3} s", bytes as f64 / elapsed.as_secs_f64() / 1e6, elapsed.as_secs_f64());
    Ok(())
}

fn print_stats(what: &str, h: &Histogram<u64>) {
    let us = |ns: u64| micros(Duration::from_nanos(ns));
    println!(
        "client: {what} us: min {:.1} avg {:.1} p50 {:.1} p99 {:.1} max {:.1}",
        us(h.min()),
        h.mean() / 1e3,
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.max())
    );
}
