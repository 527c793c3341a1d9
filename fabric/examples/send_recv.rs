//! RDMA-CM client and server exchange one message each way with SEND and RECV.
//!
//! ```text
//! send_recv --server [--port 7472]            # one terminal
//! send_recv --client 127.0.0.1[:7472]         # another
//! send_recv --both --fabric soft              # both in one process
//! ```

mod common;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use common::*;
use rdma_fabric::{
    Access, CompletionQueue, Fabric, MemoryRegion, QpInit, QueuePair, SendOp, SendRequest, WcOpcode, RNR_RETRY_INFINITE,
};

const DEFAULT_PORT: u16 = 7472;
const RECV_WR: u64 = 1;
const SEND_WR: u64 = 2;

/// SEND/RECV both ways between an RDMA-CM client and server.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    net: NetArgs,
    /// The client's message.
    #[arg(long, default_value = "ping from the client")]
    message: String,
    /// Size of the receive buffers.
    #[arg(long, default_value_t = 4096)]
    buffer: usize,
}

fn main() -> ExitCode {
    init_logging();
    finish(run(Args::parse()))
}

fn run(args: Args) -> Res<()> {
    if args.message.len() > args.buffer {
        return Err(err(format!("the message ({} bytes) exceeds --buffer {}", args.message.len(), args.buffer)));
    }
    let role = args.net.role(DEFAULT_PORT)?;
    let (net_s, net_c) = (args.net.clone(), args.net.clone());
    let buffer = args.buffer;
    let message = args.message.clone();
    run_roles(
        role,
        args.net.timeout(),
        Box::new(move |addr, ready| server(&net_s, buffer, addr, ready)),
        Box::new(move |addr| client(&net_c, buffer, &message, addr)),
    )
}

/// The objects one side needs: buffers registered for local use and separate send/recv CQs.
struct Side {
    fabric: Fabric,
    pd: rdma_fabric::ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    recv_mr: MemoryRegion,
    send_mr: MemoryRegion,
}

impl Side {
    fn new(net: &NetArgs, buffer: usize) -> Res<Self> {
        let fabric = net.open()?;
        let pd = fabric.alloc_pd()?;
        Ok(Side {
            send_cq: fabric.create_cq(16)?,
            recv_cq: fabric.create_cq(16)?,
            recv_mr: pd.register(buffer, Access::LOCAL_WRITE)?,
            send_mr: pd.register(buffer, Access::NONE)?,
            pd,
            fabric,
        })
    }

    fn qp_init(&self) -> QpInit<'_> {
        let mut init = QpInit::new(&self.pd, &self.send_cq);
        init.recv_cq = &self.recv_cq;
        // The peer may SEND before this side has posted its receive: retry until it has.
        init.rnr_retry = RNR_RETRY_INFINITE;
        init
    }

    fn post_recv(&self, qp: &QueuePair) -> Res<()> {
        Ok(qp.post_recv(RECV_WR, &[self.recv_mr.sge(0, self.recv_mr.len())])?)
    }

    fn send(&self, qp: &QueuePair, text: &str, timeout: Duration) -> Res<()> {
        self.send_mr.buffer().write(0, text.as_bytes())?;
        let sges = [self.send_mr.sge(0, text.len())];
        qp.post_send(&SendRequest::new(SEND_WR, SendOp::Send, &sges))?;
        Completions::new(self.send_cq.clone(), timeout).expect(WcOpcode::Send, SEND_WR, "SEND")?;
        Ok(())
    }

    fn recv(&self, timeout: Duration) -> Res<String> {
        let wc = Completions::new(self.recv_cq.clone(), timeout).expect(WcOpcode::Recv, RECV_WR, "RECV")?;
        let mut bytes = vec![0u8; wc.byte_len as usize];
        self.recv_mr.buffer().read(0, &mut bytes)?;
        String::from_utf8(bytes).map_err(|_| err("the received message is not UTF-8"))
    }
}

fn reply_to(message: &str) -> String {
    format!("reply to [{message}]")
}

fn server(net: &NetArgs, buffer: usize, addr: SocketAddr, mut ready: Ready) -> Res<()> {
    let timeout = net.timeout();
    let side = Side::new(net, buffer)?;
    let channel = side.fabric.create_event_channel()?;
    let listener = channel.listen(addr, 8)?;
    ready.announce(listener.local_addr());
    let request = wait_connect_request(&channel, timeout)?;
    let peer = request.peer_addr();
    let qp = request.accept(&side.qp_init(), &[])?;
    side.post_recv(&qp)?;
    wait_established(&channel, qp.conn_id(), timeout)?;
    println!("server: connection from {peer} established (qp {})", qp.qp_num());

    let message = side.recv(timeout)?;
    println!("server: received \"{message}\"");
    let reply = reply_to(&message);
    if reply.len() > buffer {
        return Err(err("the reply does not fit the peer's buffer"));
    }
    side.send(&qp, &reply, timeout)?;
    println!("server: sent \"{reply}\"");
    wait_disconnected(&channel, qp.conn_id(), timeout)?;
    println!("server: client disconnected");
    Ok(())
}

fn client(net: &NetArgs, buffer: usize, message: &str, addr: SocketAddr) -> Res<()> {
    let timeout = net.timeout();
    let side = Side::new(net, buffer)?;
    let channel = side.fabric.create_event_channel()?;
    let qp = channel.connect(addr, &side.qp_init(), &[], timeout)?;
    side.post_recv(&qp)?;
    wait_established(&channel, qp.conn_id(), timeout)?;
    println!("client: connected to {addr} (qp {})", qp.qp_num());

    side.send(&qp, message, timeout)?;
    println!("client: sent \"{message}\"");
    let reply = side.recv(timeout)?;
    println!("client: received \"{reply}\"");
    if reply != reply_to(message) {
        return Err(err(format!("unexpected reply \"{reply}\"")));
    }
    qp.disconnect()?;
    println!("client: send/recv exchange verified");
    Ok(())
}
