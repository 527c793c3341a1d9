//! Tests of what only the soft provider does for queue pairs connected by hand (the contract is
//! the conformance suite's `bootstrap_*` cases): the data port's streams seen from the wire
//! (a hello refused and counted, one bound and answered, one waiting for its queue pair), the
//! limits and timeout of streams waiting for a hello, requests that wait for a stream only as
//! long as RTS allows, and nothing left behind. Every wait has a timeout.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{data_port_of, gid_of, transport_wait};
use super::connections::Connections;
use super::handshakes::MAX_PENDING_HANDSHAKES_PER_SOURCE;
use super::hello::Hello;
use super::open::for_tests::open_inspected;
use super::wire::{FrameType, Header, HEADER_LEN, HELLO_LEN};
use crate::*;

const T: Duration = Duration::from_secs(5);

/// A device (with a short handshake timeout where a test needs one) and its connections.
fn device(handshake_timeout: Duration) -> (Fabric, Arc<Connections>) {
    let (fab, _, conns) = open_inspected(&FabricConfig::new(FabricKind::Soft), handshake_timeout).unwrap();
    (fab, conns)
}

/// A queue pair connected by hand, with what it needs, in RESET.
struct HandQp {
    qp: QueuePair,
    cq: CompletionQueue,
    pd: ProtectionDomain,
}

fn hand_qp(fab: &Fabric) -> HandQp {
    let pd = fab.alloc_pd().unwrap();
    let cq = fab.create_cq(64).unwrap();
    let qp = fab.create_qp(QpInit::new(&pd, &cq)).unwrap();
    HandQp { qp, cq, pd }
}

/// A peer that no device here is: a larger GID than loopback's, so that the queue pair moved
/// towards it waits for the peer's stream rather than dialing.
fn absent_peer() -> QpEndpoint {
    QpEndpoint {
        qp_num: 0x77,
        psn: 0x55_5555,
        port: 1,
        lid: 9,
        gid: gid_of(Ipv4Addr::new(255, 255, 255, 254).into()),
        mtu: PathMtu::Mtu4096,
    }
}

fn rts(timeout: u8, retry_count: u8) -> RtsAttr {
    RtsAttr { timeout, retry_count, rnr_retry: 7, max_rd_atomic: 4 }
}

/// Moves `qp` to INIT and RTR towards `remote`.
fn to_rtr(qp: &QueuePair, remote: QpEndpoint) {
    qp.modify_to_init(InitAttr { port: 1, access: Access::REMOTE_READ }).unwrap();
    let attr = RtrAttr {
        remote,
        path_mtu: PathMtu::Mtu4096,
        max_dest_rd_atomic: 4,
        min_rnr_timer: Duration::from_micros(640),
    };
    qp.modify_to_rtr(attr).unwrap();
}

/// A raw stream to the data port `qp`'s endpoint names.
fn dial(qp: &QueuePair) -> TcpStream {
    let port = data_port_of(&qp.local_endpoint().unwrap()).expect("a soft endpoint names its data port");
    let s = TcpStream::connect(port).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s
}

/// A hello frame with `payload` (the header's length is the payload's).
fn hello_frame(payload: &[u8]) -> Vec<u8> {
    let mut h = Header::new(FrameType::Hello);
    h.len = payload.len() as u32;
    [h.encode().as_slice(), payload].concat()
}

/// Waits until the NIC closes `s` (EOF or reset); panics if it sends anything or stays open.
fn expect_closed(s: &mut TcpStream, context: &str) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{context}: {n} unexpected bytes"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{context}: not closed within {T:?}: {e}"),
    }
}

/// Waits until `cond` holds, at most `T`.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {T:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_malformed_or_unmatched_hello_is_refused_and_counted_and_a_matching_one_answered() {
    let (fab, _) = device(Duration::from_secs(30));
    let q = hand_qp(&fab);
    let (local, remote) = (q.qp.local_endpoint().unwrap(), absent_peer());
    to_rtr(&q.qp, remote);
    let good = Hello::between(&remote, &local);
    let mut over = good.encode();
    over[0..4].copy_from_slice(&0x0100_0000u32.to_le_bytes());
    let send = {
        let mut h = Header::new(FrameType::Send);
        h.len = HELLO_LEN as u32;
        [h.encode().as_slice(), &good.encode()].concat()
    };
    let refused: [(&str, Vec<u8>); 6] = [
        ("a SEND instead of a hello", send),
        ("a queue pair number over 24 bits", hello_frame(&over)),
        ("a hello for no queue pair", hello_frame(&Hello { target_qp_num: local.qp_num ^ 1, ..good }.encode())),
        ("a hello from another peer", hello_frame(&Hello { qp_num: remote.qp_num + 1, ..good }.encode())),
        ("a hello with another PSN", hello_frame(&Hello { target_psn: local.psn ^ 1, ..good }.encode())),
        ("a stream that ends early", hello_frame(&good.encode())[..HEADER_LEN + 3].to_vec()),
    ];
    for (i, (what, bytes)) in refused.iter().enumerate() {
        let mut s = dial(&q.qp);
        s.write_all(bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        expect_closed(&mut s, what);
        assert_eq!(fab.counters().rejected_hellos, i as u64 + 1, "{what} is counted");
    }
    assert_eq!(q.qp.state(), QpState::ReadyToReceive, "refused streams leave the queue pair alone");

    // The one hello the peer's endpoint predicts is answered with this end's.
    let mut s = dial(&q.qp);
    s.write_all(&hello_frame(&good.encode())).unwrap();
    let mut answer = [0u8; HEADER_LEN + HELLO_LEN];
    s.read_exact(&mut answer).unwrap();
    let h = Header::decode(answer[..HEADER_LEN].try_into().unwrap(), 0).unwrap();
    assert_eq!((h.ty, h.len as usize), (FrameType::Hello, HELLO_LEN));
    assert_eq!(Hello::decode(&answer[HEADER_LEN..]), Some(Hello::between(&local, &remote)));
    assert_eq!(fab.counters().rejected_hellos, refused.len() as u64);
    // Bound: a second stream for the same queue pair is refused.
    let mut again = dial(&q.qp);
    again.write_all(&hello_frame(&good.encode())).unwrap();
    expect_closed(&mut again, "a second stream for a bound queue pair");
    assert_eq!(fab.counters().rejected_hellos, refused.len() as u64 + 1);
}

#[test]
fn a_hello_for_a_queue_pair_not_yet_in_rtr_waits_for_it_then_is_bound() {
    let (fab, _) = device(Duration::from_secs(30));
    let q = hand_qp(&fab);
    let (local, remote) = (q.qp.local_endpoint().unwrap(), absent_peer());
    let mut s = dial(&q.qp);
    s.write_all(&hello_frame(&Hello::between(&remote, &local).encode())).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut answer = [0u8; HEADER_LEN + HELLO_LEN];
    let early = s.read(&mut answer);
    assert!(
        matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "answered or closed in RESET: {early:?}"
    );
    to_rtr(&q.qp, remote);
    s.set_read_timeout(Some(T)).unwrap();
    s.read_exact(&mut answer).unwrap();
    assert_eq!(Hello::decode(&answer[HEADER_LEN..]), Some(Hello::between(&local, &remote)));
    assert_eq!(fab.counters().rejected_hellos, 0);
}

#[test]
fn a_stream_without_a_hello_is_closed_after_the_handshake_timeout_and_counted() {
    let timeout = Duration::from_millis(100);
    let (fab, _) = device(timeout);
    let q = hand_qp(&fab);
    let start = Instant::now();
    let mut silent = dial(&q.qp);
    expect_closed(&mut silent, "a silent stream");
    assert!(start.elapsed() >= timeout - Duration::from_millis(5), "closed before the timeout");
    let c = fab.counters();
    assert_eq!((c.handshake_timeouts, c.rejected_hellos), (1, 0));
}

#[test]
fn streams_of_one_source_beyond_the_handshake_limit_are_closed_at_once_and_counted() {
    let (fab, _) = device(Duration::from_secs(30));
    let q = hand_qp(&fab);
    let waiting: Vec<TcpStream> = (0..MAX_PENDING_HANDSHAKES_PER_SOURCE).map(|_| dial(&q.qp)).collect();
    let mut over = dial(&q.qp);
    expect_closed(&mut over, "a stream beyond the limit");
    assert_eq!(fab.counters().refused_handshakes, 1);
    // Those within the limit still wait.
    let mut first = &waiting[0];
    first.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let r = first.read(&mut [0u8; 1]);
    assert!(matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "{r:?}");
    // A slot given back (a stream closed) is taken again.
    drop(waiting);
    eventually("a stream admitted again", || {
        let mut s = dial(&q.qp);
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        matches!(s.read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    });
}

#[test]
fn a_stream_of_another_address_of_a_full_prefix_takes_the_place_of_the_oldest_silent_one() {
    let (fab, _) = device(Duration::from_secs(30));
    let q = hand_qp(&fab);
    let mut waiting: Vec<TcpStream> = (0..MAX_PENDING_HANDSHAKES_PER_SOURCE).map(|_| dial(&q.qp)).collect();
    // Another address of the same /24, holding none: the oldest silent stream gives way to it.
    let port = data_port_of(&q.qp.local_endpoint().unwrap()).unwrap();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into()).unwrap();
    sock.connect(&port.into()).unwrap();
    let newcomer = TcpStream::from(sock);
    expect_closed(&mut waiting[0], "the oldest silent stream");
    let c = fab.counters();
    assert_eq!((c.evicted_handshakes, c.refused_handshakes), (1, 0));
    for s in waiting[1..].iter().chain([&newcomer]) {
        let mut s = s;
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let r = s.read(&mut [0u8; 1]);
        assert!(matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "{r:?}");
    }
}

#[test]
fn requests_wait_for_the_stream_only_as_long_as_rts_allows() {
    let (fab, _) = device(Duration::from_secs(30));
    let q = hand_qp(&fab);
    to_rtr(&q.qp, absent_peer());
    let (timeout, retry_count) = (14, 2);
    q.qp.modify_to_rts(rts(timeout, retry_count)).unwrap();
    let buf = q.pd.register(64, Access::LOCAL_WRITE).unwrap();
    q.qp.post_recv(1, &[buf.sge(0, 32)]).unwrap();
    let start = Instant::now();
    q.qp.post_send(&SendRequest::new(2, SendOp::Send, &[buf.sge(32, 8)])).unwrap();
    let mut wcs = [WorkCompletion::default(); 2];
    let mut n = 0;
    while n < 2 {
        n += q.cq.poll_wait(&mut wcs[n..], Duration::ZERO, T).unwrap();
        assert!(start.elapsed() < T, "{n} completions within {T:?}");
    }
    let waited = start.elapsed();
    let budget = transport_wait(&rts(timeout, retry_count));
    assert!(waited >= budget, "failed after {waited:?}, before the {budget:?} RTS allows");
    let mut got: Vec<(u64, WcStatus)> = wcs.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    got.sort_unstable_by_key(|&(wr_id, _)| wr_id);
    assert_eq!(got, [(1, WcStatus::WorkRequestFlushed), (2, WcStatus::TransportRetryExceeded)]);
    assert_eq!(q.qp.state(), QpState::Error);
}

#[test]
fn queue_pairs_connected_by_hand_leave_nothing_behind() {
    let (fab, conns) = device(Duration::from_secs(30));
    for i in 0..20 {
        let (a, b) = (hand_qp(&fab), hand_qp(&fab));
        let (ea, eb) = (a.qp.local_endpoint().unwrap(), b.qp.local_endpoint().unwrap());
        to_rtr(&a.qp, eb);
        to_rtr(&b.qp, ea);
        a.qp.modify_to_rts(rts(14, 7)).unwrap();
        let buf = b.pd.register(64, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
        let local = a.pd.register(64, Access::LOCAL_WRITE).unwrap();
        a.qp.post_send(&SendRequest::new(1, SendOp::RdmaRead(buf.remote()), &[local.sge(0, 64)])).unwrap();
        let mut wc = [WorkCompletion::default(); 1];
        assert_eq!(a.cq.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        // Either end may go first; and a queue pair that never left RESET goes too.
        if i % 2 == 0 {
            drop(a);
            drop(b);
        } else {
            drop(b);
            drop(a);
        }
        drop(hand_qp(&fab));
    }
    eventually("connections removed", || conns.open.lock().is_empty() && conns.by_hand.lock().is_empty());
}

#[test]
fn an_endpoint_names_the_data_port_on_the_devices_address() {
    let (fab, conns) = device(Duration::from_secs(30));
    let (a, b) = (hand_qp(&fab), hand_qp(&fab));
    let (ea, eb) = (a.qp.local_endpoint().unwrap(), b.qp.local_endpoint().unwrap());
    let port = conns.data_port.lock().as_ref().map(|p| p.addr).expect("the data port is made with the first");
    assert_eq!(port.ip(), std::net::IpAddr::from(Ipv4Addr::LOCALHOST));
    assert_eq!(data_port_of(&ea), Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port.port()))));
    assert_eq!((ea.lid, ea.gid, ea.port), (eb.lid, eb.gid, 1), "one data port per device");
    assert!(ea.qp_num != eb.qp_num && ea.psn <= 0xFF_FFFF && eb.psn <= 0xFF_FFFF);
}

#[test]
fn init_on_a_port_the_device_lacks_is_refused_and_a_move_to_error_flushes() {
    let (fab, _) = device(Duration::from_secs(30));
    let q = hand_qp(&fab);
    let buf = q.pd.register(64, Access::LOCAL_WRITE).unwrap();
    let in_reset = q.qp.post_recv(1, &[buf.sge(0, 8)]);
    assert!(matches!(in_reset, Err(Error::InvalidArgument { verb: "post_recv", .. })), "{in_reset:?}");
    let r = q.qp.modify_to_init(InitAttr { port: 2, access: Access::NONE });
    assert!(matches!(r, Err(Error::InvalidArgument { verb: "modify_qp", .. })), "{r:?}");
    assert_eq!(q.qp.state(), QpState::Reset);
    q.qp.modify_to_init(InitAttr { port: 1, access: Access::NONE }).unwrap();
    q.qp.post_recv(2, &[buf.sge(0, 8)]).unwrap();
    q.qp.modify(&QpTransition::Error).unwrap();
    assert_eq!(q.qp.state(), QpState::Error);
    let mut wc = [WorkCompletion::default(); 2];
    assert_eq!(q.cq.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::WorkRequestFlushed));
    let r = q.qp.modify_to_rtr(RtrAttr {
        remote: absent_peer(),
        path_mtu: PathMtu::Mtu1024,
        max_dest_rd_atomic: 1,
        min_rnr_timer: Duration::ZERO,
    });
    assert!(matches!(r, Err(Error::InvalidTransition { from: QpState::Error, .. })), "{r:?}");
}
