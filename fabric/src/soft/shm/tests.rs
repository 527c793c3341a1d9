//! The same-host path's defences: what any local process can do to a device's socket, what a
//! peer's descriptors must be before they are mapped, and revocation through the key table.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::{Duration, Instant};

use super::endpoint::{Endpoint, Offer};
use super::keys::{KeyTable, PeerKeys};
use super::map::{reopen_read_only, PeerMapping};
use super::proto;
use crate::memory::sealed_memfd;
use crate::soft::connections::Connections;
use crate::soft::handshakes::HANDSHAKE_TIMEOUT;
use crate::soft::open::for_tests::open_inspected;
use crate::*;

const T: Duration = Duration::from_secs(5);

fn attach(ep: &Endpoint) -> UnixStream {
    let addr = SocketAddr::from_abstract_name(ep.abstract_name()).expect("an abstract name");
    let s = UnixStream::connect_addr(&addr).expect("connect to the device's same-host socket");
    s.set_read_timeout(Some(T)).unwrap();
    s
}

/// Plays the same-host end of connection `conn`: opens the device's stream with the offer's
/// nonce and asks for the inbox (with its keys); returns the stream (the inbox lives while it
/// is open) and the descriptors granted with it.
fn take_inbox(ep: &Endpoint, conn: ConnId) -> (UnixStream, Vec<OwnedFd>) {
    let offer = ep.offer(conn).expect("an offer");
    let mut s = attach(ep);
    s.write_all(&proto::hello(offer.nonce)).unwrap();
    s.write_all(&proto::Request::Inbox { flags: proto::WANT_KEYS }.encode()).unwrap();
    let mut answer = [0u8; proto::ANSWER_LEN];
    let mut fds = Vec::new();
    let mut got = 0;
    while got < answer.len() {
        let (n, more) = super::fds::recv_with_fds(&s, &mut answer[got..]).unwrap();
        assert!(n > 0, "the device answers the inbox request");
        got += n;
        fds.extend(more);
    }
    assert!(proto::Answer::decode(&answer).unwrap().granted);
    (s, fds)
}

/// Reads until the device closes the stream (bounded by the read timeout).
fn closed_by_the_device(mut s: UnixStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0))
}

/// Two devices' protection domains, CQs and event channels, and a listener on B: what the
/// tests need to connect queue pairs from A to B.
/// A soft device with the same-host path off: the end a test plays by hand (a stranger, a
/// poisoner), whose peer finds no same-host stream to use.
/// A soft fabric with the same-host path off: every frame goes through the NIC threads.
pub(in crate::soft) fn network_only_fabric() -> Fabric {
    open(&FabricConfig { soft: SoftOptions::default().same_host(SameHost::Off), ..FabricConfig::new(FabricKind::Soft) })
        .unwrap()
}

/// The objects on two devices A and B that connect queue pairs from A to B.
pub(in crate::soft) struct Ends {
    pub(in crate::soft) pd_a: ProtectionDomain,
    pub(in crate::soft) pd_b: ProtectionDomain,
    pub(in crate::soft) cq_a: CompletionQueue,
    pub(in crate::soft) cq_b: CompletionQueue,
    ch_a: EventChannel,
    ch_b: EventChannel,
    listener: Listener,
}

impl Ends {
    pub(in crate::soft) fn new(a: &Fabric, b: &Fabric) -> Ends {
        let ch_b = b.create_event_channel().unwrap();
        let listener = ch_b.listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), 4).unwrap();
        Ends {
            pd_a: a.alloc_pd().unwrap(),
            pd_b: b.alloc_pd().unwrap(),
            cq_a: a.create_cq(16).unwrap(),
            cq_b: b.create_cq(16).unwrap(),
            ch_a: a.create_event_channel().unwrap(),
            ch_b,
            listener,
        }
    }

    /// Connects a queue pair of A (settings from `a`) to one of B (`b`); returns both once A's
    /// end is established.
    pub(in crate::soft) fn connect(
        &self,
        a: impl FnOnce(QpInit<'_>) -> QpInit<'_>,
        b: impl FnOnce(QpInit<'_>) -> QpInit<'_>,
    ) -> (QueuePair, QueuePair) {
        let qp_a =
            self.ch_a.connect(self.listener.local_addr(), &a(QpInit::new(&self.pd_a, &self.cq_a)), &[], T).unwrap();
        let req = loop {
            if let CmEvent::ConnectRequest(req) = self.ch_b.get_event(T).unwrap().expect("a request") {
                break req;
            }
        };
        let qp_b = req.accept(&b(QpInit::new(&self.pd_b, &self.cq_b)), &[]).unwrap();
        while !matches!(self.ch_a.get_event(T).unwrap(), Some(CmEvent::Established { conn, .. }) if conn == qp_a.conn_id())
        {
        }
        (qp_a, qp_b)
    }
}

#[test]
fn garbage_unknown_nonces_and_silent_streams_are_dropped_and_the_device_keeps_serving() {
    let (fab, device, _) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let ep = device.shm.as_ref().expect("same-host path on by default");

    let mut garbage = attach(ep);
    garbage.write_all(&[0xFF; proto::MSG_LEN]).unwrap();
    assert!(closed_by_the_device(garbage), "a stream opening with garbage is closed");

    let mut stranger = attach(ep);
    stranger.write_all(&proto::hello(0x1234_5678_9ABC)).unwrap();
    assert!(closed_by_the_device(stranger), "a hello with a nonce nobody offered is closed");

    // Streams that never say hello: the device keeps at most 64 of them, closing the oldest.
    let silent: Vec<UnixStream> = (0..100).map(|_| attach(ep)).collect();
    let mut silent = silent.into_iter();
    for s in silent.by_ref().take(36) {
        assert!(closed_by_the_device(s), "the oldest silent streams are closed past the bound");
    }

    // A real connection from another device still takes the same-host path and reads.
    let other = open(&FabricConfig::new(FabricKind::Soft)).unwrap();
    let ends = Ends::new(&other, &fab);
    let Ends { pd_a, pd_b, cq_a, .. } = &ends;
    let (a, _b) = ends.connect(|i| i, |i| i);
    assert_eq!(a.data_path(), DataPath::SharedMemory);
    let remote = pd_b.register(4096, Access::REMOTE_READ).unwrap();
    remote.buffer().write(0, b"still serving").unwrap();
    let local = pd_a.register(64, Access::LOCAL_WRITE).unwrap();
    let sge = [local.sge(0, 13)];
    a.post_send(&SendRequest::new(1, SendOp::RdmaRead(remote.remote()), &sge)).unwrap();
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::from_micros(50), T).unwrap(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut got = [0u8; 13];
    local.buffer().read(0, &mut got).unwrap();
    assert_eq!(&got, b"still serving");
    drop(silent);
}

#[test]
fn a_nonce_opens_one_stream_once() {
    let ep = Endpoint::open(None).unwrap();
    let offer = ep.offer(7).expect("an offer");
    let mut h = crate::soft::wire::Header::new(crate::soft::wire::FrameType::ConnectReq);
    offer.stamp(&mut h);
    assert_eq!(Offer::from_header(&h), Some(offer));
    assert_eq!(ep.redeem(offer.nonce), Some(7));
    assert_eq!(ep.redeem(offer.nonce), None, "a nonce is good once");
    let withdrawn = ep.offer(8).unwrap();
    ep.withdraw(withdrawn.nonce);
    assert_eq!(ep.redeem(withdrawn.nonce), None, "a withdrawn nonce opens nothing");
    assert!(!ep.same_boot(&offer), "a device never takes the same-host path to itself");
    assert!(ep.connect(&offer).is_none());
}

#[test]
fn objects_that_could_shrink_or_are_too_small_are_not_mapped() {
    // SAFETY: a plain call with a valid C string; the descriptor is owned right away.
    let unsealed = unsafe {
        let fd = libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        OwnedFd::from_raw_fd(fd)
    };
    // SAFETY: a plain call on a descriptor we own.
    assert_eq!(unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&unsealed), 8192) }, 0);
    assert!(PeerMapping::new(unsealed.as_fd(), 4096, false).is_err(), "no shrink seal: not mapped");
    let sealed = sealed_memfd(c"sealed", 8192).unwrap();
    assert!(PeerMapping::new(sealed.as_fd(), 8193, false).is_err(), "smaller than claimed: not mapped");
    assert!(PeerMapping::new(sealed.as_fd(), 8192, false).is_ok());
    let read_only = reopen_read_only(sealed.as_fd()).unwrap();
    assert!(PeerMapping::new(read_only.as_fd(), 4096, true).is_err(), "a read-only descriptor maps read-only only");
    assert!(PeerMapping::new(read_only.as_fd(), 4096, false).is_ok());
}

#[test]
fn a_revoked_slot_is_seen_at_once_and_a_reused_slot_has_a_new_word() {
    let table = KeyTable::new().unwrap();
    let peer = PeerKeys::map(table.peer_fd()).unwrap();
    let first = table.publish(0xAAAA).unwrap();
    assert!(peer.live(first));
    table.revoke(first);
    assert!(!peer.live(first), "revoked");
    let second = table.publish(0xAAAA).unwrap();
    assert_eq!(second.index, first.index, "the slot is reused");
    assert_ne!(second.word, first.word, "with a new generation");
    assert!(!peer.live(first) && peer.live(second));
}

/// SENDs this end of the connections `conns` wrote into the peer's inbox.
fn inbox_sends(conns: &Connections) -> u64 {
    conns.open.lock().values().map(|c| c.st.lock().inbox_sends).sum()
}

#[test]
fn small_sends_with_a_claimed_receive_go_through_the_inbox_and_all_sends_keep_post_order() {
    let (fab_a, _, conns_a) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let fab_b = open(&FabricConfig::new(FabricKind::Soft)).unwrap();
    let ends = Ends::new(&fab_a, &fab_b);
    let Ends { pd_a, pd_b, cq_a, cq_b, .. } = &ends;
    let (a, b) = ends.connect(
        |i| QpInit { rnr_retry: RNR_RETRY_INFINITE, ..i },
        |i| QpInit { min_rnr_timer: Duration::from_millis(1), ..i },
    );
    assert_eq!(a.data_path(), DataPath::SharedMemory);

    const BIG: usize = super::MAX_INLINE + 1000;
    let rbuf = pd_b.register(4 * BIG, Access::LOCAL_WRITE).unwrap();
    for i in 0..3 {
        b.post_recv(i, &[rbuf.sge(i as usize * BIG, BIG)]).unwrap();
    }
    let sbuf = pd_a.register(BIG, Access::NONE).unwrap();
    sbuf.buffer().write(0, &vec![0x5A; BIG]).unwrap();
    let send = |id: u64, len: usize| {
        a.post_send(&SendRequest::new(id, SendOp::SendWithImm(id as u32), &[sbuf.sge(0, len)])).unwrap()
    };
    // 1: small, a receive to claim: the inbox. 2: too large for it: the stream. 3: small, but
    // behind 2 unless 2 was acknowledged already. 4: small, no receive left to claim: the
    // stream, waiting (RNR) until one is posted.
    send(1, 8);
    assert_eq!(inbox_sends(&conns_a), 1, "a small SEND with a receive to claim went through the inbox");
    send(2, BIG);
    send(3, 8);
    let mut wcs = [WorkCompletion::default(); 4];
    let mut got = Vec::new();
    while got.len() < 3 {
        let n = cq_b.poll_wait(&mut wcs, Duration::ZERO, T).unwrap();
        assert!(n > 0, "receives {got:?} of 3 within {T:?}");
        got.extend(wcs[..n].iter().map(|wc| (wc.status, wc.imm, wc.byte_len)));
    }
    let expect = |imm: u32, len: usize| (WcStatus::Success, Some(imm), len as u32);
    assert_eq!(got, [expect(1, 8), expect(2, BIG), expect(3, 8)], "receives in post order");
    let before = inbox_sends(&conns_a);
    send(4, 8);
    assert_eq!(inbox_sends(&conns_a), before, "no receive to claim: not through the inbox");
    assert_eq!(cq_b.poll(&mut wcs).unwrap(), 0, "no receive posted yet");
    b.post_recv(3, &[rbuf.sge(3 * BIG, BIG)]).unwrap();
    assert_eq!(cq_b.poll_wait(&mut wcs, Duration::ZERO, T).unwrap(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].imm), (3, Some(4)));
    let mut sent = Vec::new();
    while sent.len() < 4 {
        let n = cq_a.poll_wait(&mut wcs, Duration::ZERO, T).unwrap();
        assert!(n > 0, "SEND completions {sent:?} of 4 within {T:?}");
        sent.extend(wcs[..n].iter().map(|wc| (wc.wr_id, wc.status)));
    }
    assert_eq!(sent, (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(), "SENDs complete in post order");
}

#[test]
fn copies_and_sends_stop_the_moment_the_responders_queue_pair_fails() {
    let (fab_a, _, conns_a) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let fab_b = open(&FabricConfig::new(FabricKind::Soft)).unwrap();
    let ends = Ends::new(&fab_a, &fab_b);
    let Ends { pd_a, pd_b, cq_a, .. } = &ends;
    let (a, b) = ends.connect(|i| i, |i| i);
    let remote = pd_b.register(4096, Access::REMOTE_READ).unwrap();
    let rbuf = pd_b.register(64, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        b.post_recv(i, &[rbuf.sge(0, 64)]).unwrap();
    }
    let local = pd_a.register(64, Access::LOCAL_WRITE).unwrap();
    let sge = [local.sge(0, 64)];
    let mut wc = [WorkCompletion::default(); 1];
    // Map the region and the inbox while both ends are live.
    a.post_send(&SendRequest::new(1, SendOp::RdmaRead(remote.remote()), &sge)).unwrap();
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    a.post_send(&SendRequest::new(2, SendOp::Send, &sge)).unwrap();
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::Success));
    assert_eq!(inbox_sends(&conns_a), 1);

    // A's NIC thread cannot hear of the disconnect while the test holds its receive state, so
    // only the responder's key slot can stop A: its queue pair fails at once.
    let conn = conns_a.open.lock().values().next().expect("A's connection").clone();
    let held = conn.rx.lock();
    b.disconnect().unwrap();
    a.post_send(&SendRequest::new(3, SendOp::RdmaRead(remote.remote()), &sge)).unwrap();
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::TransportRetryExceeded), "a READ of a dead responder");
    drop(held);

    // The same for a SEND, on a second connection: with a receive to claim, it still takes
    // the stream once the responder's queue pair failed, and fails with it.
    let (a2, b2) = ends.connect(|i| i, |i| i);
    b2.post_recv(10, &[rbuf.sge(0, 64)]).unwrap();
    b2.post_recv(11, &[rbuf.sge(0, 64)]).unwrap();
    a2.post_send(&SendRequest::new(20, SendOp::Send, &sge)).unwrap();
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (20, WcStatus::Success));
    let conn2 = conns_a.open.lock().get(&a2.conn_id()).expect("A's second connection").clone();
    assert_eq!(conn2.st.lock().inbox_sends, 1, "the second connection's first SEND used the inbox");
    let held = conn2.rx.lock();
    b2.disconnect().unwrap();
    a2.post_send(&SendRequest::new(21, SendOp::Send, &sge)).unwrap();
    assert_eq!(conn2.st.lock().inbox_sends, 1, "no SEND into the inbox of a dead responder");
    drop(held);
    assert_eq!(cq_a.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 21);
    assert!(!wc[0].status.is_success(), "a SEND to a dead responder failed: {:?}", wc[0]);
}

/// A request to the peer (a round trip to its NIC thread) holds up no copy or SEND of the same
/// connection: those may run on the NIC thread under the connection's lock, and must never wait
/// for the peer's NIC thread. Here the peer reads the request and does not answer while another
/// thread copies; then it hangs up, and the client reports the broken stream.
#[test]
fn a_request_waiting_for_the_peer_holds_up_no_copy_or_send() {
    use super::ShmClient;
    use std::sync::Arc;
    let (ours, mut peer) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(T)).unwrap();
    peer.set_read_timeout(Some(T)).unwrap();
    let client = Arc::new(ShmClient::new(ours));
    let asking = {
        let client = client.clone();
        std::thread::spawn(move || client.prefetch(7))
    };
    let mut request = [0u8; 16];
    let n = peer.read(&mut request).expect("the request arrives");
    assert!(n > 0);
    // The request waits for its answer; a copy meanwhile finds nothing mapped at once.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let copier = {
        let client = client.clone();
        std::thread::spawn(move || {
            let _ = done_tx.send((client.copy(7, 0, &[], true), client.send(&[], 0, None, false)));
        })
    };
    let (copied, sent) = done_rx.recv_timeout(T).expect("the copy and the SEND did not wait for the request");
    assert_eq!((copied, sent), (WcStatus::RemoteAccessError, false));
    copier.join().unwrap();
    drop(peer);
    asking.join().unwrap();
    assert_eq!(client.copy(7, 0, &[], true), WcStatus::TransportRetryExceeded, "the stream broke");
}

/// What the same-host socket of a device owned by root lets a process of user `nobody` do,
/// with a nonce really offered for a live connection: the device closes the stream before it
/// reads anything (counted), so no region's memory object reaches that process. Runs the
/// other user's process as a forked child (the test runs as root; skipped otherwise).
#[test]
fn a_process_of_another_user_gets_no_stream() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: switching to another user takes root");
        return;
    }
    // A connection whose B end has no same-host stream yet (A's device has the path off), as a
    // stranger would find one to bind to.
    let fab_a = network_only_fabric();
    let (fab_b, device_b, _) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let ends = Ends::new(&fab_a, &fab_b);
    let (a, b) = ends.connect(|i| i, |i| i);
    let secret = ends.pd_b.register(4096, Access::REMOTE_READ).unwrap();
    let ep = device_b.shm.as_ref().expect("same-host path on by default");
    let offer = ep.offer(b.conn_id()).expect("an offer");

    // Everything the child uses is made before the fork: it only makes system calls.
    let name = ep.abstract_name();
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, &c) in name.iter().enumerate() {
        addr.sun_path[1 + i] = c as libc::c_char;
    }
    let addr_len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    let mut msgs = [0u8; 2 * proto::MSG_LEN];
    msgs[..proto::MSG_LEN].copy_from_slice(&proto::hello(offer.nonce));
    msgs[proto::MSG_LEN..].copy_from_slice(&proto::Request::Region { rkey: secret.rkey(), flags: 0 }.encode());

    // SAFETY: the child makes only async-signal-safe system calls on memory prepared above,
    // then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: plain system calls on valid, prepared buffers (see above).
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(3);
            }
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let tv = libc::timeval { tv_sec: 5, tv_usec: 0 };
            libc::setsockopt(
                s,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
            if libc::connect(s, (&addr as *const libc::sockaddr_un).cast(), addr_len) != 0 {
                libc::_exit(4);
            }
            libc::send(s, msgs.as_ptr().cast(), msgs.len(), libc::MSG_NOSIGNAL);
            let mut answer = [0u8; proto::ANSWER_LEN];
            let n = libc::recv(s, answer.as_mut_ptr().cast(), answer.len(), libc::MSG_WAITALL);
            // 0: the device closed the stream; 1: it answered (granted or not); 2: anything else.
            let code = match n {
                0 => 0,
                n if n == answer.len() as isize => 1,
                _ if *libc::__errno_location() == libc::ECONNRESET => 0,
                _ => 2,
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child ended by a signal: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the device must close the stream of another user's process");
    assert_eq!(fab_b.counters().refused_same_host_peers, 1, "the refusal is counted");

    // The connection still reads.
    let local = ends.pd_a.register(64, Access::LOCAL_WRITE).unwrap();
    secret.buffer().write(0, b"ours").unwrap();
    let sge = [local.sge(0, 4)];
    a.post_send(&SendRequest::new(1, SendOp::RdmaRead(secret.remote()), &sge)).unwrap();
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(ends.cq_a.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
}

#[test]
fn only_the_same_user_or_the_allowed_group_may_be_at_the_other_end() {
    use super::endpoint::{PeerCred, PeerRule};
    let rule = PeerRule { uid: 1000, group: None };
    let cred = |uid, gid| PeerCred { pid: 42, uid, gid };
    assert_eq!(rule.refuses(&cred(1000, 5)), None);
    let why = rule.refuses(&cred(1001, 5)).expect("another user is refused");
    assert!(why.contains("1001") && why.contains("1000"), "the reason names both users: {why}");
    let grouped = PeerRule { uid: 1000, group: Some(5) };
    assert_eq!(grouped.refuses(&cred(1001, 5)), None, "the allowed group is let in");
    assert!(grouped.refuses(&cred(1001, 6)).is_some());
    // A real socket: both ends are this process.
    let (x, _y) = UnixStream::pair().unwrap();
    assert_eq!(PeerRule::own(None).refuses_peer_of(x.as_fd()), None);
}

/// A region request for an rkey the connection may not have (here, one of another protection
/// domain of the device) is refused once: the stream closes after the answer, and the
/// connection's queue pair fails as for a remote access error (its receive is flushed),
/// counted. On the stream there is no second guess.
#[test]
fn a_refused_region_request_ends_the_stream_and_fails_the_queue_pair() {
    let fab_a = network_only_fabric();
    let (fab_b, device_b, _) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let ends = Ends::new(&fab_a, &fab_b);
    let (_a, b) = ends.connect(|i| i, |i| i);
    let rbuf = ends.pd_b.register(64, Access::LOCAL_WRITE).unwrap();
    b.post_recv(7, &[rbuf.sge(0, 64)]).unwrap();
    let other_pd = fab_b.alloc_pd().unwrap();
    let secret = other_pd.register(4096, Access::REMOTE_READ).unwrap();
    let own = ends.pd_b.register(4096, Access::REMOTE_READ).unwrap();
    let ep = device_b.shm.as_ref().expect("same-host path on by default");
    let offer = ep.offer(b.conn_id()).expect("an offer");

    let mut s = attach(ep);
    s.write_all(&proto::hello(offer.nonce)).unwrap();
    s.write_all(&proto::Request::Region { rkey: secret.rkey(), flags: 0 }.encode()).unwrap();
    let mut answer = [0u8; proto::ANSWER_LEN];
    s.read_exact(&mut answer).expect("the refusal");
    assert!(!proto::Answer::decode(&answer).expect("an answer").granted, "another domain's region is refused");
    // A second guess, even a right one, gets no answer: the stream is closed.
    let _ = s.write_all(&proto::Request::Region { rkey: own.rkey(), flags: 0 }.encode());
    let mut buf = [0u8; 64];
    let end = s.read(&mut buf);
    assert!(
        matches!(&end, Ok(0)) || matches!(&end, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the stream ends after a refusal: {end:?}"
    );

    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(ends.cq_b.poll_wait(&mut wc, Duration::ZERO, T).unwrap(), 1, "the queue pair failed");
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::WorkRequestFlushed));
    assert_eq!(fab_b.counters().remote_access_errors, 1, "counted as a remote access error");
}

/// A same-host sender writes `u64::MAX` into every word of shared memory it can write (its
/// inbox, the bell of the receiver's CQ; its credit page it cannot even map writable), over
/// and over while the others send: the SENDs of the other senders of the same shared receive
/// queue, one on the same-host path and one over TCP, all land within a bound; the poisoner's
/// connection fails and is counted.
#[test]
fn a_sender_poisoning_shared_pages_is_cut_and_nobody_else_notices() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const SENDS: u64 = 200;
    let (fab_b, device_b, _) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let pd_b = fab_b.alloc_pd().unwrap();
    let cq_b = fab_b.create_cq(1024).unwrap();
    let srq = pd_b.create_srq(1024, 1).unwrap();
    let ch_b = fab_b.create_event_channel().unwrap();
    let listener = ch_b.listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), 8).unwrap();
    // Senders: the poisoner's device has the path off (the test plays its same-host end), the
    // honest one has it on, the third is on the network path.
    let senders = [network_only_fabric(), open(&FabricConfig::new(FabricKind::Soft)).unwrap(), network_only_fabric()];
    let mut ends = Vec::new();
    for fab in &senders {
        let pd = fab.alloc_pd().unwrap();
        let cq = fab.create_cq(1024).unwrap();
        let ch = fab.create_event_channel().unwrap();
        let qp = ch
            .connect(listener.local_addr(), &QpInit { rnr_retry: RNR_RETRY_INFINITE, ..QpInit::new(&pd, &cq) }, &[], T)
            .unwrap();
        let req = loop {
            if let CmEvent::ConnectRequest(req) = ch_b.get_event(T).unwrap().expect("a request") {
                break req;
            }
        };
        let qp_b = req
            .accept(
                &QpInit { srq: Some(&srq), min_rnr_timer: Duration::from_millis(1), ..QpInit::new(&pd_b, &cq_b) },
                &[],
            )
            .unwrap();
        while !matches!(ch.get_event(T).unwrap(), Some(CmEvent::Established { .. })) {}
        ends.push((pd, cq, ch, qp, qp_b));
    }
    assert_eq!(ends[1].3.data_path(), DataPath::SharedMemory);
    assert_eq!(ends[2].3.data_path(), DataPath::Network);
    let rbuf = pd_b.register(64 * 64, Access::LOCAL_WRITE).unwrap();
    for i in 0..64u64 {
        srq.post_recv(i, &[rbuf.sge(i as usize * 64, 64)]).unwrap();
    }

    // The poisoner opens the same-host stream of its connection and asks for the inbox.
    let ep = device_b.shm.as_ref().expect("same-host path on by default");
    let (_stream, fds) = take_inbox(ep, ends[0].4.conn_id());
    // Every page it was given that it can map writable, it poisons: its inbox and the bell.
    let writable: Vec<Arc<PeerMapping>> =
        fds.iter().filter_map(|fd| PeerMapping::new(fd.as_fd(), 4096, true).ok()).map(Arc::new).collect();
    assert_eq!(
        writable.len(),
        2,
        "only the inbox and the bell's hint page are writable (not the credits, not the owner page)"
    );
    let poisoning = Arc::new(AtomicBool::new(true));
    let passes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let poisoner = {
        let (writable, poisoning, passes) = (writable.clone(), poisoning.clone(), passes.clone());
        std::thread::spawn(move || {
            while poisoning.load(Ordering::Relaxed) {
                for page in &writable {
                    for at in (0..4096).step_by(8) {
                        page.word(at).unwrap().store(u64::MAX, Ordering::SeqCst);
                    }
                }
                passes.fetch_add(1, Ordering::Release);
                std::thread::yield_now();
            }
        })
    };
    // The pages are poisoned before anyone sends (on a loaded machine the poisoner's thread
    // may otherwise first run after every SEND landed, and nothing would have been seen).
    let deadline = Instant::now() + T;
    while passes.load(Ordering::Acquire) == 0 {
        assert!(Instant::now() < deadline, "the poisoner did not run within {T:?}");
        std::thread::yield_now();
    }

    // The others send, in turn; every SEND lands, within a bound.
    let sbufs: Vec<MemoryRegion> = ends.iter().map(|e| e.0.register(8, Access::NONE).unwrap()).collect();
    let mut received = [0u64; 3];
    let mut completed = [0u64; 3];
    let mut wcs = [WorkCompletion::default(); 64];
    let reap = |received: &mut [u64; 3], wait: Duration| {
        let mut wcs = [WorkCompletion::default(); 64];
        let n = cq_b.poll_wait(&mut wcs, Duration::from_micros(50), wait).unwrap();
        for wc in &wcs[..n] {
            if wc.opcode == WcOpcode::Recv {
                assert!(wc.status.is_success(), "a receive failed: {wc:?}");
                received[(wc.imm.expect("an immediate") >> 16) as usize] += 1;
                srq.post_recv(wc.wr_id, &[rbuf.sge(wc.wr_id as usize * 64, 64)]).unwrap();
            }
        }
    };
    let deadline = Instant::now() + T;
    let mut next = [0u64; 3];
    while received[1] < SENDS || received[2] < SENDS {
        assert!(Instant::now() < deadline, "SENDs received {received:?} of {SENDS} each within {T:?}");
        for k in 1..3 {
            let (_, cq, _, qp, _) = &ends[k];
            let n = cq.poll(&mut wcs).unwrap();
            for wc in &wcs[..n] {
                assert!(wc.status.is_success(), "sender {k}: {wc:?}");
            }
            completed[k] += n as u64;
            // At most 32 SENDs outstanding per sender.
            while next[k] < SENDS && next[k] - completed[k] < 32 {
                let imm = (k as u32) << 16 | next[k] as u32;
                qp.post_send(&SendRequest::new(next[k], SendOp::SendWithImm(imm), &[sbufs[k].sge(0, 8)])).unwrap();
                next[k] += 1;
            }
        }
        reap(&mut received, Duration::from_millis(1));
    }
    assert_eq!(received, [0, SENDS, SENDS], "every SEND of the others landed, none of the poisoner's");
    // The owner cuts the poisoner when it next looks at its pages: polling the CQ.
    while fab_b.counters().shared_page_violations == 0 {
        assert!(Instant::now() < deadline, "the poisoner was not cut within {T:?}: {:?}", fab_b.counters());
        reap(&mut received, Duration::from_millis(1));
    }
    eprintln!(
        "received {received:?} in {:?}; {:?}",
        T - deadline.saturating_duration_since(Instant::now()),
        fab_b.counters()
    );
    poisoning.store(false, Ordering::Relaxed);
    poisoner.join().unwrap();

    // The poisoner's connection failed and was counted.
    assert_eq!(fab_b.counters().shared_page_violations, 1, "{:?}", fab_b.counters());
    let qp_p = &ends[0].4;
    let sb = pd_b.register(8, Access::NONE).unwrap();
    if qp_p.post_send(&SendRequest::new(99, SendOp::Send, &[sb.sge(0, 8)])).is_ok() {
        let n = cq_b.poll_wait(&mut wcs, Duration::ZERO, T).unwrap();
        assert!(n >= 1);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (99, WcStatus::WorkRequestFlushed), "its queue pair is in error");
    }
}

/// The state of a thread of this process (`R`, `S`, ...), from `/proc`.
fn thread_state(tid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the state follows the last one.
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

/// How the owner of a CQ waits in [`a_hostile_sender_delays_no_wake_up_of_the_others`], once
/// it has polled, armed and polled again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parked {
    /// Blocking in the provider (`wait`, as `poll_wait` does).
    Blocking,
    /// An event loop: `poll(2)` on `notify_fd`, then `take_notification`.
    EventLoop,
}

/// A hostile same-host sender into a CQ, holding every descriptor the owner hands a sender,
/// replays over and over the idle state of every page of one page it can map writable (the
/// armed word cleared, the count of SENDs frozen) and reads every eventfd it was given (to
/// steal the wake-ups). The owner parks on the CQ, in `poll_wait` or in an event loop, with a
/// timed re-poll of `REPOLL`; an honest same-host sender's SEND into the same CQ still wakes
/// it within `WAKE_BOUND`, each time. (Before each sender had a bell of its own, the owner
/// slept until its re-poll.)
#[test]
fn a_hostile_sender_delays_no_wake_up_of_the_others() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const REPOLL: Duration = Duration::from_secs(5);
    const WAKE_BOUND: Duration = Duration::from_secs(1);
    let (fab_b, device_b, _) = open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let (honest_fab, _, honest_conns) =
        open_inspected(&FabricConfig::new(FabricKind::Soft), HANDSHAKE_TIMEOUT).unwrap();
    let pd_b = fab_b.alloc_pd().unwrap();
    let cq_b = fab_b.create_cq(64).unwrap();
    let ch_b = fab_b.create_event_channel().unwrap();
    let listener = ch_b.listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), 8).unwrap();
    // The hostile's device has the path off (the test plays its same-host end); both queue
    // pairs of B complete their receives on `cq_b`.
    let senders = [network_only_fabric(), honest_fab];
    let mut ends = Vec::new();
    for fab in &senders {
        let pd = fab.alloc_pd().unwrap();
        let cq = fab.create_cq(64).unwrap();
        let ch = fab.create_event_channel().unwrap();
        let qp = ch.connect(listener.local_addr(), &QpInit::new(&pd, &cq), &[], T).unwrap();
        let req = loop {
            if let CmEvent::ConnectRequest(req) = ch_b.get_event(T).unwrap().expect("a request") {
                break req;
            }
        };
        let qp_b = req.accept(&QpInit::new(&pd_b, &cq_b), &[]).unwrap();
        while !matches!(ch.get_event(T).unwrap(), Some(CmEvent::Established { .. })) {}
        ends.push((pd, cq, ch, qp, qp_b));
    }
    assert_eq!(ends[1].3.data_path(), DataPath::SharedMemory);
    let rbuf = pd_b.register(64 * 8, Access::LOCAL_WRITE).unwrap();
    for i in 0..8u64 {
        ends[1].4.post_recv(i, &[rbuf.sge(i as usize * 64, 64)]).unwrap();
    }

    // The hostile opens the same-host stream of its connection and takes its inbox.
    let ep = device_b.shm.as_ref().expect("same-host path on by default");
    let (_stream, fds) = take_inbox(ep, ends[0].4.conn_id());
    let is_event = |fd: &OwnedFd| {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .is_ok_and(|l| l.as_os_str() == "anon_inode:[eventfd]")
    };
    let page_long = |fd: &OwnedFd| std::fs::File::from(fd.try_clone().unwrap()).metadata().unwrap().len() == 4096;
    let events: Vec<OwnedFd> = fds.iter().filter(|fd| is_event(fd)).map(|fd| fd.try_clone().unwrap()).collect();
    let pages: Vec<(Arc<PeerMapping>, Vec<u64>)> = fds
        .iter()
        .filter(|fd| !is_event(fd) && page_long(fd))
        .filter_map(|fd| PeerMapping::new(fd.as_fd(), 4096, true).ok())
        .map(|page| {
            let idle = (0..4096).step_by(8).map(|at| page.word(at).unwrap().load(Ordering::SeqCst)).collect();
            (Arc::new(page), idle)
        })
        .collect();
    assert!(!events.is_empty() && !pages.is_empty(), "a sender is handed an eventfd and a writable bell page");
    let hostile_on = Arc::new(AtomicBool::new(true));
    // Passes of the hostile over everything it holds.
    let passes = Arc::new(AtomicU64::new(0));
    let hostile = {
        let (hostile_on, passes) = (hostile_on.clone(), passes.clone());
        std::thread::spawn(move || {
            let mut count = 0u64;
            while hostile_on.load(Ordering::Relaxed) {
                for (page, idle) in &pages {
                    for (i, word) in idle.iter().enumerate() {
                        page.word(i * 8).unwrap().store(*word, Ordering::SeqCst);
                    }
                }
                for fd in &events {
                    // SAFETY: reads at most 8 bytes into a live u64 from a non-blocking eventfd.
                    unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
                }
                passes.fetch_add(1, Ordering::SeqCst);
                std::thread::yield_now();
            }
        })
    };

    // The owner parks, round after round; once it sleeps, the honest sender SENDs.
    let rounds = [Parked::Blocking, Parked::EventLoop, Parked::Blocking, Parked::EventLoop];
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (woke_tx, woke_rx) = std::sync::mpsc::channel();
    // The round the owner has armed for and found nothing in (it goes to sleep next), plus 1.
    let parked = Arc::new(AtomicU64::new(0));
    let owner = {
        let (cq, parked) = (cq_b.clone(), parked.clone());
        std::thread::spawn(move || {
            let mut wcs = [WorkCompletion::default(); 4];
            let fd = cq.notify_fd().unwrap().as_raw_fd();
            for (round, mode) in rounds.into_iter().enumerate() {
                // SAFETY: gettid has no preconditions.
                ready_tx.send(unsafe { libc::gettid() }).unwrap();
                let deadline = Instant::now() + REPOLL;
                // The protocol `poll_wait` follows, or an event loop's; with the re-poll period.
                let n = loop {
                    let n = cq.poll(&mut wcs).unwrap();
                    if n > 0 {
                        break n;
                    }
                    cq.arm().unwrap();
                    let n = cq.poll(&mut wcs).unwrap();
                    let left = deadline.saturating_duration_since(Instant::now());
                    if n > 0 || left.is_zero() {
                        break n;
                    }
                    parked.store(round as u64 + 1, Ordering::SeqCst);
                    match mode {
                        Parked::Blocking => {
                            cq.wait(left).unwrap();
                        }
                        Parked::EventLoop => {
                            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                            // SAFETY: one valid pollfd for the duration of the call.
                            unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
                            cq.take_notification().unwrap();
                        }
                    }
                };
                woke_tx.send((mode, Instant::now(), wcs[..n].to_vec())).unwrap();
            }
        })
    };
    let sbuf = ends[1].0.register(8, Access::NONE).unwrap();
    let mut wcs = [WorkCompletion::default(); 4];
    for (round, mode) in rounds.into_iter().enumerate() {
        let tid = ready_rx.recv_timeout(REPOLL + T).expect("the owner parks again");
        let deadline = Instant::now() + T;
        while parked.load(Ordering::SeqCst) != round as u64 + 1 || thread_state(tid) != Some('S') {
            assert!(Instant::now() < deadline, "the owner did not park within {T:?}");
            std::thread::yield_now();
        }
        // The hostile has gone over everything once more since the owner parked (armed).
        let seen = passes.load(Ordering::SeqCst);
        while passes.load(Ordering::SeqCst) < seen + 2 {
            assert!(Instant::now() < deadline, "the hostile stalled");
            std::thread::yield_now();
        }
        let before = inbox_sends(&honest_conns);
        let sent = Instant::now();
        ends[1].3.post_send(&SendRequest::new(round as u64, SendOp::Send, &[sbuf.sge(0, 8)])).unwrap();
        assert_eq!(inbox_sends(&honest_conns), before + 1, "the honest SEND went through the inbox");
        let (woke_in, woke_at, got) = woke_rx.recv_timeout(REPOLL + T).expect("the owner returns");
        assert_eq!(woke_in, mode);
        let latency = woke_at.saturating_duration_since(sent);
        assert!(
            got.iter().any(|wc| wc.opcode == WcOpcode::Recv && wc.status.is_success()),
            "round {round} ({mode:?}): the owner got {got:?} after {latency:?} (its re-poll is {REPOLL:?})"
        );
        assert!(latency < WAKE_BOUND, "round {round} ({mode:?}): woken {latency:?} after the SEND");
        eprintln!("round {round} ({mode:?}): woken {latency:?} after the SEND");
        assert_eq!(ends[1].1.poll_wait(&mut wcs, Duration::ZERO, T).unwrap(), 1, "the SEND completed");
    }
    owner.join().unwrap();
    hostile_on.store(false, Ordering::Relaxed);
    hostile.join().unwrap();
}

/// The other way round: a device of root offered to open a same-host stream to a socket that
/// a process of user `nobody` listens on (any process can take an abstract name) does not:
/// the connecting end checks who listens, and the connection keeps the network path. Runs the
/// other user's listener as a forked child (the test runs as root; skipped otherwise).
#[test]
fn a_device_opens_no_stream_to_a_socket_of_another_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: switching to another user takes root");
        return;
    }
    let ep = Endpoint::open(None).unwrap();
    let own = ep.offer(1).expect("an offer");
    let token = own.token ^ 0x5A5A_0000_0000_0001;
    let name = format!("rdma-pubsub/soft/{token:016x}");
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, &c) in name.as_bytes().iter().enumerate() {
        addr.sun_path[1 + i] = c as libc::c_char;
    }
    let addr_len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    let mut ready = [0i32; 2];
    let mut done = [0i32; 2];
    // SAFETY: plain pipe creation into valid arrays.
    assert!(unsafe { libc::pipe(ready.as_mut_ptr()) == 0 && libc::pipe(done.as_mut_ptr()) == 0 });
    // SAFETY: the child makes only async-signal-safe system calls on memory prepared above,
    // then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: plain system calls on valid, prepared buffers.
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(3);
            }
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if libc::bind(s, (&addr as *const libc::sockaddr_un).cast(), addr_len) != 0 || libc::listen(s, 4) != 0 {
                libc::_exit(4);
            }
            libc::write(ready[1], [1u8].as_ptr().cast(), 1);
            let mut b = [0u8; 1];
            // Waits until the parent is done (or gone).
            libc::read(done[0], b.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    let mut b = [0u8; 1];
    // SAFETY: reads one byte into a live buffer from our pipe.
    assert_eq!(unsafe { libc::read(ready[0], b.as_mut_ptr().cast(), 1) }, 1, "the child listens");
    let offer = Offer { token, boot: own.boot, nonce: 7 };
    let client = ep.connect(&offer);
    let mut status = 0;
    // SAFETY: writes one byte from a live buffer, waits for our own child, closes our pipes.
    unsafe {
        libc::write(done[1], b.as_ptr().cast(), 1);
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        for fd in ready.into_iter().chain(done) {
            libc::close(fd);
        }
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child failed: {status}");
    assert!(client.is_none(), "a stream was opened to another user's socket");
}
