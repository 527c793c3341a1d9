//! A hostile publisher made of raw fabric objects ([`RawPublisher`]): one hand-written ring,
//! accept data of its own making for every subscriber of its topic, served until dropped.
//! `limits.rs` attacks READs with it (network path), `in_place.rs` in-place reads (same host).

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
            let mut qps = Vec::new();
            // Serves until told to stop (or for longer than any test waits).
            let deadline = Instant::now() + 3 * WAIT;
            while stopped.try_recv().is_err() && Instant::now() < deadline {
                if let Ok(Some(CmEvent::ConnectRequest(req))) = channel.get_event(Duration::from_millis(20)) {
                    qps.push(req.accept(&QpInit::new(&pd, &cq), &accept).expect("accept"));
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
