//! SEND, RECV, RDMA READ and RDMA WRITE over one reliable connection, in the manner of the RC
//! example of the "RDMA Aware Networks Programming User Manual".
//!
//! Each side registers one region (local write, remote read, remote write) and tells the other
//! its address and rkey in the CM private data (connect / accept). Then, each step verified:
//!
//! 1. server SEND  -> client RECV   (a message)
//! 2. client SEND  -> server RECV   (a message)
//! 3. client READ  <- server region (the server's pattern)
//! 4. client WRITE -> server region (the client's pattern), then SEND "done": the server checks
//! 5. server READ  <- client region (the client's pattern)
//! 6. server WRITE -> client region (a third pattern), then SEND "done": the client checks
//!
//! With `--bootstrap cm` (the default) RDMA-CM connects the queue pairs and the regions travel
//! in its private data. With `--bootstrap tcp` the two connect them by hand as the seed programs
//! do: a TCP socket between them carries each side's queue pair endpoint and region, each side
//! moves its own queue pair through INIT, RTR and RTS, and the two sync over the socket before
//! and after the operations (see `common/bootstrap.rs`).
//!
//! ```text
//! rc_ops --server [--port 7474] [--bootstrap tcp]
//! rc_ops --client 127.0.0.1[:7474] [--bootstrap tcp]
//! rc_ops --both --fabric soft [--bootstrap tcp]
//! ```

mod common;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use common::*;
use rdma_fabric::{
    Access, CompletionQueue, Fabric, MemoryRegion, ProtectionDomain, QpInit, QueuePair, RemoteAddr, SendOp,
    SendRequest, WcOpcode, RNR_RETRY_INFINITE,
};

const DEFAULT_PORT: u16 = 7474;
const SERVER_SEED: u32 = 0x5e4e;
const CLIENT_SEED: u32 = 0xc11e;
const SERVER_WRITE_SEED: u32 = 0x3717;

/// All four RC operations between a client and a server, each verified.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    boot: BootstrapArgs,
    /// Bytes moved by READ and WRITE (the region size).
    #[arg(short = 'z', long, default_value_t = 65536)]
    size: u32,
}

fn main() -> ExitCode {
    init_logging();
    finish(run(Args::parse()))
}

fn run(args: Args) -> Res<()> {
    if args.size < 64 {
        return Err(err("--size must be at least 64 bytes"));
    }
    let role = args.net.role(DEFAULT_PORT)?;
    let (net_s, net_c) = (args.net.clone(), args.net.clone());
    let (size, boot) = (args.size, args.boot.bootstrap);
    run_roles(
        role,
        args.net.timeout(),
        Box::new(move |addr, ready| server(&net_s, boot, size, addr, ready)),
        Box::new(move |addr| client(&net_c, boot, size, addr)),
    )
}

/// Layout of each side's region: `[0, size)` is the exposed data; a message area follows.
const MSG_LEN: usize = 64;

/// One side: its region, a message buffer, a staging buffer for READs, and separate CQs.
struct Side {
    name: &'static str,
    size: usize,
    region: MemoryRegion,
    msg_out: MemoryRegion,
    msg_in: MemoryRegion,
    staging: MemoryRegion,
    send: Completions,
    recv: Completions,
    next_wr: u64,
}

impl Side {
    fn new(
        name: &'static str,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        size: u32,
        net: &NetArgs,
    ) -> Res<Self> {
        let size = size as usize;
        Ok(Side {
            name,
            size,
            region: pd.register(size, Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE)?,
            msg_out: pd.register(MSG_LEN, Access::NONE)?,
            msg_in: pd.register(MSG_LEN, Access::LOCAL_WRITE)?,
            staging: pd.register(size, Access::LOCAL_WRITE)?,
            send: Completions::new(send_cq.clone(), net.timeout()),
            recv: Completions::new(recv_cq.clone(), net.timeout()),
            next_wr: 100,
        })
    }

    fn info(&self) -> RegionInfo {
        RegionInfo { remote: self.region.remote(), len: self.size as u32, extra: 0 }
    }

    fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    fn post_recv(&mut self, qp: &QueuePair) -> Res<()> {
        Ok(qp.post_recv(0, &[self.msg_in.sge(0, MSG_LEN)])?)
    }

    fn send(&mut self, qp: &QueuePair, text: &str) -> Res<()> {
        if text.len() > MSG_LEN {
            return Err(err("message too long"));
        }
        self.msg_out.buffer().write(0, text.as_bytes())?;
        let wr_id = self.wr();
        let sges = [self.msg_out.sge(0, text.len())];
        qp.post_send(&SendRequest::new(wr_id, SendOp::Send, &sges))?;
        self.send.expect(WcOpcode::Send, wr_id, "SEND")?;
        Ok(())
    }

    /// Takes the next message and posts a new receive for the one after.
    fn recv(&mut self, qp: &QueuePair) -> Res<String> {
        let wc = self.recv.expect(WcOpcode::Recv, 0, "RECV")?;
        let mut bytes = vec![0u8; wc.byte_len as usize];
        self.msg_in.buffer().read(0, &mut bytes)?;
        self.post_recv(qp)?;
        String::from_utf8(bytes).map_err(|_| err("received message is not UTF-8"))
    }

    fn expect_msg(&mut self, qp: &QueuePair, expected: &str) -> Res<()> {
        let got = self.recv(qp)?;
        if got != expected {
            return Err(err(format!("expected message \"{expected}\", got \"{got}\"")));
        }
        println!("{}: RECV  \"{got}\" ok", self.name);
        Ok(())
    }

    fn read_and_check(&mut self, qp: &QueuePair, peer: RemoteAddr, seed: u32) -> Res<()> {
        self.staging.buffer().fill(0, self.size, 0)?;
        let wr_id = self.wr();
        let sges = [self.staging.sge(0, self.size)];
        qp.post_send(&SendRequest::new(wr_id, SendOp::RdmaRead(peer), &sges))?;
        let wc = self.send.expect(WcOpcode::RdmaRead, wr_id, "RDMA READ")?;
        let mut data = vec![0u8; self.size];
        self.staging.buffer().read(0, &mut data)?;
        check_pattern(seed, &data).map_err(|e| err(format!("RDMA READ: {e}")))?;
        println!("{}: READ  {} bytes from the peer ok (completion reports {})", self.name, self.size, wc.byte_len);
        Ok(())
    }

    fn write_then_notify(&mut self, qp: &QueuePair, peer: RemoteAddr, seed: u32) -> Res<()> {
        self.staging.buffer().write(0, &pattern(seed, self.size))?;
        let write_wr = self.wr();
        let sges = [self.staging.sge(0, self.size)];
        qp.post_send(&SendRequest::new(write_wr, SendOp::RdmaWrite(peer), &sges))?;
        self.send.expect(WcOpcode::RdmaWrite, write_wr, "RDMA WRITE")?;
        println!("{}: WRITE {} bytes into the peer", self.name, self.size);
        self.send(qp, "write done")
    }

    fn check_own_region(&self, seed: u32, what: &str) -> Res<()> {
        let mut data = vec![0u8; self.size];
        self.region.buffer().read(0, &mut data)?;
        check_pattern(seed, &data).map_err(|e| err(format!("{what}: {e}")))?;
        println!("{}: own region holds the peer's WRITE ok", self.name);
        Ok(())
    }
}

/// The remote access each side's queue pair allows: the peer READs and WRITEs its region.
fn qp_access() -> Access {
    Access::REMOTE_READ | Access::REMOTE_WRITE
}

/// How each side creates its queue pair: separate CQs, SENDs retried until a receive is there.
fn qp_init<'a>(pd: &'a ProtectionDomain, send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> QpInit<'a> {
    let mut init = QpInit::new(pd, send_cq);
    init.recv_cq = recv_cq;
    init.rnr_retry = RNR_RETRY_INFINITE;
    init
}

/// Refuses a peer whose region differs from this side's.
fn check_peer_region(peer: &RegionInfo, side: &Side, who: &str) -> Res<()> {
    if peer.len as usize != side.size {
        return Err(err(format!("the {who}'s region is {} bytes, this side's {}", peer.len, side.size)));
    }
    Ok(())
}

fn server(net: &NetArgs, boot: Bootstrap, size: u32, addr: SocketAddr, mut ready: Ready) -> Res<()> {
    let timeout = net.timeout();
    let fabric = net.open()?;
    let pd = fabric.alloc_pd()?;
    let (send_cq, recv_cq) = (fabric.create_cq(32)?, fabric.create_cq(32)?);
    let mut side = Side::new("server", &pd, &send_cq, &recv_cq, size, net)?;
    side.region.buffer().write(0, &pattern(SERVER_SEED, side.size))?;
    let init = qp_init(&pd, &send_cq, &recv_cq);
    let (qp, peer, mut link) = match boot {
        Bootstrap::Cm => accept_cm(&fabric, &init, &mut side, addr, &mut ready, timeout)?,
        Bootstrap::Tcp => {
            let mut channel = accept_side_channel(addr, &mut ready, timeout)?;
            let (qp, peer) =
                connect_by_hand(&mut channel, &fabric, &init, side.info(), qp_access(), |qp| side.post_recv(qp))?;
            (qp, peer, Link::Tcp(channel))
        }
    };
    check_peer_region(&peer, &side, "client")?;
    println!(
        "server: connected; client region {:#x} rkey {:#x} ({} bytes)",
        peer.remote.addr, peer.remote.rkey, peer.len
    );
    link.before_operations()?;

    side.send(&qp, "hello from the server")?;
    println!("server: SEND  \"hello from the server\"");
    side.expect_msg(&qp, "hello from the client")?;
    // Step 3: the client READs this side's region; step 4: it WRITEs it, then says so.
    side.expect_msg(&qp, "write done")?;
    side.check_own_region(CLIENT_SEED, "client's RDMA WRITE")?;
    side.read_and_check(&qp, peer.remote, CLIENT_SEED)?;
    side.write_then_notify(&qp, peer.remote, SERVER_WRITE_SEED)?;
    link.await_close(&qp, timeout)?;
    println!("server: all operations verified");
    Ok(())
}

/// The server's RDMA-CM connection: listens, accepts the client's request (its region in the
/// private data, this side's in the accept's) and waits until it is established.
fn accept_cm(
    fabric: &Fabric,
    init: &QpInit<'_>,
    side: &mut Side,
    addr: SocketAddr,
    ready: &mut Ready,
    timeout: Duration,
) -> Res<(QueuePair, RegionInfo, Link)> {
    let channel = fabric.create_event_channel()?;
    let listener = channel.listen(addr, 8)?;
    ready.announce(listener.local_addr());
    let request = wait_connect_request(&channel, timeout)?;
    let peer = RegionInfo::decode(request.private_data())?;
    if let Err(e) = check_peer_region(&peer, side, "client") {
        request.reject(b"region sizes differ")?;
        return Err(e);
    }
    let qp = request.accept(init, &side.info().encode())?;
    side.post_recv(&qp)?;
    wait_established(&channel, qp.conn_id(), timeout)?;
    Ok((qp, peer, Link::Cm { channel, listener: Some(listener) }))
}

fn client(net: &NetArgs, boot: Bootstrap, size: u32, addr: SocketAddr) -> Res<()> {
    let timeout = net.timeout();
    let fabric = net.open()?;
    let pd = fabric.alloc_pd()?;
    let (send_cq, recv_cq) = (fabric.create_cq(32)?, fabric.create_cq(32)?);
    let mut side = Side::new("client", &pd, &send_cq, &recv_cq, size, net)?;
    let init = qp_init(&pd, &send_cq, &recv_cq);
    let (qp, peer, mut link) = match boot {
        Bootstrap::Cm => {
            let channel = fabric.create_event_channel()?;
            let qp = channel.connect(addr, &init, &side.info().encode(), timeout)?;
            side.post_recv(&qp)?;
            let peer = RegionInfo::decode(&wait_established(&channel, qp.conn_id(), timeout)?)?;
            (qp, peer, Link::Cm { channel, listener: None })
        }
        Bootstrap::Tcp => {
            let mut channel = SideChannel::connect(addr, timeout)?;
            let (qp, peer) =
                connect_by_hand(&mut channel, &fabric, &init, side.info(), qp_access(), |qp| side.post_recv(qp))?;
            (qp, peer, Link::Tcp(channel))
        }
    };
    check_peer_region(&peer, &side, "server")?;
    println!(
        "client: connected; server region {:#x} rkey {:#x} ({} bytes)",
        peer.remote.addr, peer.remote.rkey, peer.len
    );
    link.before_operations()?;

    side.expect_msg(&qp, "hello from the server")?;
    side.send(&qp, "hello from the client")?;
    println!("client: SEND  \"hello from the client\"");
    side.read_and_check(&qp, peer.remote, SERVER_SEED)?;
    // The region is this side's pattern before the server READs it (step 5).
    side.region.buffer().write(0, &pattern(CLIENT_SEED, side.size))?;
    side.write_then_notify(&qp, peer.remote, CLIENT_SEED)?;
    side.expect_msg(&qp, "write done")?;
    side.check_own_region(SERVER_WRITE_SEED, "server's RDMA WRITE")?;
    link.close(&qp)?;
    println!("client: all operations verified (SEND, RECV, RDMA READ, RDMA WRITE)");
    Ok(())
}
