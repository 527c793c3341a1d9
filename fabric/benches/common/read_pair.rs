//! The raw READ measurement both benches compare against: a requester on one soft device
//! READing a window another soft device exposes, over one RC connection on loopback.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdma_fabric::{
    self as fabric, Access, CmEvent, CompletionQueue, EventChannel, Fabric, FabricConfig, FabricKind, MemoryRegion,
    QpCaps, QpInit, QueuePair, RemoteAddr, SendOp, SendRequest, WorkCompletion,
};

/// Bytes the responder exposes (and the requester lands READs in).
pub const WINDOW_BYTES: usize = 8 << 20;
/// Most READs kept outstanding.
pub const MAX_OUTSTANDING: usize = 16;
const WAIT: Duration = Duration::from_secs(30);

fn soft_fabric() -> Fabric {
    fabric::open(&FabricConfig::new(FabricKind::Soft)).expect("open the soft fabric")
}

fn next_event(channel: &EventChannel, what: &str) -> CmEvent {
    channel.get_event(WAIT).expect("get CM event").unwrap_or_else(|| panic!("no CM event ({what}) within {WAIT:?}"))
}

/// A requester connected to a responder that exposes `WINDOW_BYTES` for remote READ. Field
/// order is drop order: queue pairs first, then regions, then the fabrics.
pub struct ReadPair {
    qp: QueuePair,
    _responder_qp: QueuePair,
    cq: CompletionQueue,
    local: MemoryRegion,
    remote: RemoteAddr,
    _exposed: MemoryRegion,
    _channels: (EventChannel, EventChannel),
    _fabrics: (Fabric, Fabric),
}

impl ReadPair {
    /// Opens two soft devices and connects them.
    pub fn new() -> Self {
        let responder = soft_fabric();
        let rpd = responder.alloc_pd().expect("responder pd");
        let rcq = responder.create_cq(64).expect("responder cq");
        let exposed = rpd.register(WINDOW_BYTES, Access::REMOTE_READ).expect("register exposed window");
        exposed.buffer().fill(0, WINDOW_BYTES, 0xa5).expect("fill");
        let rch = responder.create_event_channel().expect("responder channel");
        let listener = rch.listen(SocketAddr::from(([127, 0, 0, 1], 0)), 4).expect("listen");

        let requester = soft_fabric();
        let pd = requester.alloc_pd().expect("requester pd");
        let cq = requester.create_cq(256).expect("requester cq");
        let local = pd.register(WINDOW_BYTES, Access::LOCAL_WRITE).expect("register local window");
        let ch = requester.create_event_channel().expect("requester channel");
        let mut init = QpInit::new(&pd, &cq);
        init.caps = QpCaps { max_send_wr: 64, ..QpCaps::default() };
        let qp = ch.connect(listener.local_addr(), &init, &[], WAIT).expect("connect");

        let CmEvent::ConnectRequest(req) = next_event(&rch, "connect request") else {
            panic!("expected a connect request")
        };
        let responder_qp = req.accept(&QpInit::new(&rpd, &rcq), &[]).expect("accept");
        for (channel, conn) in [(&ch, qp.conn_id()), (&rch, responder_qp.conn_id())] {
            match next_event(channel, "established") {
                CmEvent::Established { conn: c, .. } if c == conn => {}
                other => panic!("expected Established, got {other:?}"),
            }
        }
        drop(listener);
        ReadPair {
            qp,
            _responder_qp: responder_qp,
            cq,
            local,
            remote: exposed.remote(),
            _exposed: exposed,
            _channels: (ch, rch),
            _fabrics: (requester, responder),
        }
    }

    /// Issues `count` READs of `size` bytes with up to `depth` outstanding, polling completions
    /// for `spin` before blocking; returns the time.
    pub fn reads(&self, count: u64, size: usize, depth: usize, spin: Duration) -> Duration {
        let mut wcs = [WorkCompletion::default(); 32];
        let (mut posted, mut done) = (0u64, 0u64);
        let start = Instant::now();
        while done < count {
            while posted < count && posted - done < depth as u64 {
                let slot = (posted % depth as u64) as usize * size;
                let sges = [self.local.sge(slot, size)];
                let remote = RemoteAddr { addr: self.remote.addr + slot as u64, rkey: self.remote.rkey };
                let wr = SendRequest::new(posted, SendOp::RdmaRead(remote), &sges);
                self.qp.post_send(&wr).expect("post READ");
                posted += 1;
            }
            let n = self.cq.poll_wait(&mut wcs, spin, WAIT).expect("poll");
            assert!(n > 0, "no READ completion within {WAIT:?}");
            for wc in &wcs[..n] {
                assert!(wc.status.is_success(), "READ {} failed: {:?}", wc.wr_id, wc.status);
            }
            done += n as u64;
        }
        start.elapsed()
    }
}
