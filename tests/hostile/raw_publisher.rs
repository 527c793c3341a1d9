//! A hostile publisher made of raw fabric objects ([`RawPublisher`]): one hand-written ring,
//! accept data of its own making for every subscriber of its topic, served until dropped.
//! `limits.rs` attacks READs with it (network path), `in_place.rs` in-place reads (same host),
//! `doorbell.rs` the records a doorbell brings.

use super::*;

use std::sync::mpsc;
use std::thread::JoinHandle;

use rdma_pubsub::fabric::SameHost;
use rdma_wire::protocol::PolicyKind;

/// The geometry a [`RawPublisher`] advertises.
#[derive(Clone, Copy)]
pub struct RawRing {
    /// Data-area capacity (the region registered is as large, with its control block).
    pub capacity: usize,
    /// `max_record_payload` advertised.
    pub max_record_payload: u32,
    /// The publisher id its accept names.
    pub publisher_id: u64,
}

/// A raw-fabric publisher of one ring, serving it on a thread of its own until dropped.
pub struct RawPublisher {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl RawPublisher {
    /// Listens on loopback (its fabric's same-host path as `same_host` says) and accepts every
    /// subscriber of `topic` at the ring's start position (`capacity`, sequence 1), once
    /// `write` has filled the region.
    pub fn start(
        topic: &str,
        same_host: SameHost,
        ring: RawRing,
        write: impl FnOnce(&MemoryRegion) + Send + 'static,
    ) -> RawPublisher {
        RawPublisher::start_ringing(topic, same_host, ring, write, None)
    }

    /// As [`start`](Self::start), and answers the first doorbell request of its (one)
    /// subscriber with the SEND `doorbell`, whatever it is (at most 2 KiB).
    pub fn start_ringing(
        topic: &str,
        same_host: SameHost,
        ring: RawRing,
        write: impl FnOnce(&MemoryRegion) + Send + 'static,
        doorbell: Option<Vec<u8>>,
    ) -> RawPublisher {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let topic = TopicId::of(topic);
        let thread = std::thread::spawn(move || {
            let config = FabricConfig {
                soft: fabric::SoftOptions::default().same_host(same_host),
                ..FabricConfig::new(FabricKind::Soft)
            };
            let fabric = fabric::open(&config).expect("hostile fabric");
            let pd = fabric.alloc_pd().unwrap();
            let cq = fabric.create_cq(64).unwrap();
            let channel = fabric.create_event_channel().unwrap();
            let region = pd.register(layout::region_len(ring.capacity), Access::REMOTE_READ).unwrap();
            write(&region);
            let listener = channel.listen(SocketAddr::from(([127, 0, 0, 1], 0)), 4).unwrap();
            addr_tx.send(listener.local_addr()).unwrap();
            let accept = AcceptData {
                topic,
                ring: region.remote(),
                region_len: region.len() as u64,
                capacity: ring.capacity as u64,
                epoch: 1,
                publisher_id: ring.publisher_id,
                policy: PolicyKind::Block,
                max_record_payload: ring.max_record_payload,
                start_position: ring.capacity as u64,
                start_seq: 1,
                first_seq: 1,
                checksum: Checksum::Crc32c,
                message_type: None,
                tags: AcceptTags::default(),
            }
            .encode()
            .unwrap();
            // Control slots: four receives of 64 bytes, then the doorbell's SEND.
            const SLOT: usize = 64;
            let ctrl = pd.register(4 * SLOT + 2048, Access::LOCAL_WRITE).unwrap();
            let mut doorbell = doorbell;
            let mut qps: Vec<QueuePair> = Vec::new();
            let mut wcs = [WorkCompletion::default(); 8];
            // Serves until told to stop (or for longer than any test waits).
            let deadline = Instant::now() + 3 * WAIT;
            while stopped.try_recv().is_err() && Instant::now() < deadline {
                if let Ok(Some(CmEvent::ConnectRequest(req))) = channel.get_event(Duration::from_millis(5)) {
                    let qp = req.accept(&QpInit::new(&pd, &cq), &accept).expect("accept");
                    if doorbell.is_some() {
                        for slot in 0..4 {
                            qp.post_recv(slot as u64, &[ctrl.sge(slot * SLOT, SLOT)]).expect("post a receive");
                        }
                    }
                    qps.push(qp);
                }
                let n = cq.poll(&mut wcs).unwrap_or(0);
                for wc in &wcs[..n] {
                    if wc.opcode != WcOpcode::Recv || wc.status != WcStatus::Success {
                        continue;
                    }
                    let mut bytes = [0u8; SLOT];
                    let len = (wc.byte_len as usize).min(SLOT);
                    ctrl.buffer().read(wc.wr_id as usize * SLOT, &mut bytes[..len]).unwrap();
                    let (Ok(Control::DoorbellRequest { armed: true, .. }), Some(qp)) =
                        (Control::decode(&bytes[..len]), qps.last())
                    else {
                        continue;
                    };
                    if let Some(message) = doorbell.take() {
                        ctrl.buffer().write(4 * SLOT, &message).unwrap();
                        let sge = [ctrl.sge(4 * SLOT, message.len())];
                        qp.post_send(&SendRequest::new(99, SendOp::Send, &sge)).expect("post the doorbell");
                    }
                }
            }
        });
        let addr = addr_rx.recv_timeout(WAIT).expect("the hostile publisher listens");
        RawPublisher { addr, stop, thread: Some(thread) }
    }
}

impl Drop for RawPublisher {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
