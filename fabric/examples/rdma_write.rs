//! The server RDMA-WRITEs a string into the client's memory, as simpleIBverbs does.
//!
//! The client registers a buffer with remote write access and sends its address, rkey and
//! length in the connect private data. The server WRITEs the string there, then SENDs an
//! immediate carrying the string's length so the client knows the data has landed (RC
//! delivers the WRITE before the SEND that follows it). The client checks its buffer.
//!
//! With `--bootstrap tcp` the buffer's address, rkey and length travel over a TCP socket
//! instead, with each side's queue pair endpoint, and each side connects its queue pair by hand
//! (INIT, RTR, RTS), as simpleIBverbs and the manual's RC example do (see `common/bootstrap.rs`).
//!
//! ```text
//! rdma_write --server [--port 7473] [--bootstrap tcp]
//! rdma_write --client 127.0.0.1[:7473] [--bootstrap tcp]
//! rdma_write --both --fabric soft [--bootstrap tcp]
//! ```

mod common;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use common::*;
use rdma_fabric::{
    Access, CompletionQueue, Fabric, ProtectionDomain, QpInit, QueuePair, SendOp, SendRequest, WcOpcode,
    MAX_CONNECT_PRIVATE_DATA, RNR_RETRY_INFINITE,
};

const DEFAULT_PORT: u16 = 7473;
const WRITE_WR: u64 = 1;
const NOTIFY_WR: u64 = 2;
const RECV_WR: u64 = 3;

/// The server writes a string into the client's registered buffer.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    boot: BootstrapArgs,
    /// What the server writes.
    #[arg(long, default_value = "Hello from the server, written by RDMA WRITE")]
    text: String,
    /// Size of the client's buffer.
    #[arg(long, default_value_t = 4096)]
    buffer: u32,
}

fn main() -> ExitCode {
    init_logging();
    finish(run(Args::parse()))
}

fn run(args: Args) -> Res<()> {
    let role = args.net.role(DEFAULT_PORT)?;
    let (net_s, net_c) = (args.net.clone(), args.net.clone());
    let text = args.text.clone();
    let expected = args.text.clone();
    let (buffer, boot) = (args.buffer, args.boot.bootstrap);
    if buffer == 0 {
        return Err(err("--buffer must be at least 1 byte"));
    }
    run_roles(
        role,
        args.net.timeout(),
        Box::new(move |addr, ready| server(&net_s, boot, &text, addr, ready)),
        Box::new(move |addr| client(&net_c, boot, buffer, &expected, addr)),
    )
}

/// How each side creates its queue pair: SENDs retried until a receive is there.
fn qp_init<'a>(pd: &'a ProtectionDomain, cq: &'a CompletionQueue) -> QpInit<'a> {
    let mut init = QpInit::new(pd, cq);
    init.rnr_retry = RNR_RETRY_INFINITE;
    init
}

/// Refuses a text longer than the client's buffer.
fn check_fits(text: &str, target: &RegionInfo) -> Res<()> {
    if text.len() > target.len as usize {
        return Err(err(format!("the text ({} bytes) exceeds the client's {}-byte buffer", text.len(), target.len)));
    }
    Ok(())
}

fn server(net: &NetArgs, boot: Bootstrap, text: &str, addr: SocketAddr, mut ready: Ready) -> Res<()> {
    let timeout = net.timeout();
    let fabric = net.open()?;
    let pd = fabric.alloc_pd()?;
    let cq = fabric.create_cq(16)?;
    let src = pd.register(text.len(), Access::NONE)?;
    src.buffer().write(0, text.as_bytes())?;
    let len = u32::try_from(text.len()).map_err(|_| err("text too long"))?;
    let init = qp_init(&pd, &cq);
    let (qp, target, mut link) = match boot {
        Bootstrap::Cm => accept_cm(&fabric, &init, text, addr, &mut ready, timeout)?,
        Bootstrap::Tcp => {
            let mut channel = accept_side_channel(addr, &mut ready, timeout)?;
            let source = RegionInfo { remote: src.remote(), len, extra: 0 };
            let (qp, target) = connect_by_hand(&mut channel, &fabric, &init, source, Access::NONE, |_| Ok(()))?;
            check_fits(text, &target)?;
            (qp, target, Link::Tcp(channel))
        }
    };
    let peer = link.peer_addr(&qp);
    println!("server: {peer} offers {} bytes at {:#x} rkey {:#x}", target.len, target.remote.addr, target.remote.rkey);
    link.before_operations()?;

    let mut completions = Completions::new(cq, timeout);
    let sges = [src.sge(0, text.len())];
    qp.post_send(&SendRequest::new(WRITE_WR, SendOp::RdmaWrite(target.remote), &sges))?;
    qp.post_send(&SendRequest::new(NOTIFY_WR, SendOp::SendWithImm(len), &[]))?;
    completions.expect(WcOpcode::RdmaWrite, WRITE_WR, "RDMA WRITE")?;
    completions.expect(WcOpcode::Send, NOTIFY_WR, "SEND with immediate")?;
    println!("server: wrote {len} bytes into the client's buffer and notified it");
    link.await_close(&qp, timeout)?;
    println!("server: client disconnected");
    Ok(())
}

/// The server's RDMA-CM connection: listens, takes the client's buffer from its connect
/// request, accepts, and waits until the connection is established.
fn accept_cm(
    fabric: &Fabric,
    init: &QpInit<'_>,
    text: &str,
    addr: SocketAddr,
    ready: &mut Ready,
    timeout: Duration,
) -> Res<(QueuePair, RegionInfo, Link)> {
    let channel = fabric.create_event_channel()?;
    let listener = channel.listen(addr, 8)?;
    ready.announce(listener.local_addr());
    let request = wait_connect_request(&channel, timeout)?;
    let target = RegionInfo::decode(request.private_data())?;
    if let Err(e) = check_fits(text, &target) {
        request.reject(b"text longer than the client's buffer")?;
        return Err(e);
    }
    let qp = request.accept(init, &[])?;
    wait_established(&channel, qp.conn_id(), timeout)?;
    Ok((qp, target, Link::Cm { channel, listener: Some(listener) }))
}

fn client(net: &NetArgs, boot: Bootstrap, buffer: u32, expected: &str, addr: SocketAddr) -> Res<()> {
    let timeout = net.timeout();
    let fabric = net.open()?;
    let pd = fabric.alloc_pd()?;
    let cq = fabric.create_cq(16)?;
    let target = pd.register(buffer as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let info = RegionInfo { remote: target.remote(), len: buffer, extra: 0 };
    let init = qp_init(&pd, &cq);
    // The notification is a SEND with immediate and no payload: a receive without buffers takes it.
    let post_recv = |qp: &QueuePair| Ok(qp.post_recv(RECV_WR, &[])?);
    let (qp, mut link) = match boot {
        Bootstrap::Cm => {
            let private_data = info.encode();
            debug_assert!(private_data.len() <= MAX_CONNECT_PRIVATE_DATA);
            let channel = fabric.create_event_channel()?;
            let qp = channel.connect(addr, &init, &private_data, timeout)?;
            post_recv(&qp)?;
            wait_established(&channel, qp.conn_id(), timeout)?;
            (qp, Link::Cm { channel, listener: None })
        }
        Bootstrap::Tcp => {
            let mut channel = SideChannel::connect(addr, timeout)?;
            let (qp, _) = connect_by_hand(&mut channel, &fabric, &init, info, Access::REMOTE_WRITE, post_recv)?;
            (qp, Link::Tcp(channel))
        }
    };
    println!(
        "client: connected to {addr}; offered {buffer} bytes at {:#x} rkey {:#x}",
        info.remote.addr, info.remote.rkey
    );
    link.before_operations()?;

    let wc = Completions::new(cq, timeout).expect(WcOpcode::Recv, RECV_WR, "notification")?;
    let len = wc.imm.ok_or_else(|| err("the notification carries no immediate data"))? as usize;
    if len > buffer as usize {
        return Err(err(format!("the server claims {len} bytes, the buffer has {buffer}")));
    }
    let mut bytes = vec![0u8; len];
    target.buffer().read(0, &mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    println!("client: buffer holds \"{text}\"");
    if text != expected {
        return Err(err(format!("expected \"{expected}\", found \"{text}\"")));
    }
    link.close(&qp)?;
    println!("client: RDMA WRITE verified ({len} bytes)");
    Ok(())
}
