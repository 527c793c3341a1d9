//! Round trips, size limits at the largest values, and hostile input.

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use proptest::prelude::*;

use super::*;
use crate::ring::Checksum;
use rdma_fabric::{RemoteAddr, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

/// The largest connect data without a proof.
fn largest_unproven_connect() -> ConnectData {
    ConnectData {
        topic: TopicId(u64::MAX),
        start: StartAt::Earliest,
        accepts: PolicySet::ALL,
        node_id: u64::MAX,
        flags: ConnectFlags::WANTS_DOORBELLS,
        auth: ConnectAuth::None,
    }
}

/// The largest connect data: every varint at its longest, and a proof.
fn largest_connect() -> ConnectData {
    let proof = Proof { nonce: u64::MAX, timestamp_ms: u64::MAX, tag: [0xff; PROOF_TAG_LEN] };
    ConnectData { auth: ConnectAuth::Proof(proof), ..largest_unproven_connect() }
}

fn largest_accept() -> AcceptData {
    AcceptData {
        topic: TopicId(u64::MAX),
        ring: RemoteAddr { addr: u64::MAX, rkey: u32::MAX },
        region_len: u64::MAX,
        capacity: u64::MAX,
        epoch: u64::MAX,
        publisher_id: u64::MAX,
        policy: PolicyKind::Overwrite,
        max_record_payload: u32::MAX,
        start_position: u64::MAX,
        start_seq: u64::MAX,
        first_seq: u64::MAX,
        checksum: Checksum::XxHash64,
        message_type: Some(MessageTypeTag::new(u64::MAX, &"é".repeat(MAX_TYPE_NAME))),
        tags: AcceptTags { node: Some([0xff; PROOF_TAG_LEN]), topic: Some([0xff; PROOF_TAG_LEN]) },
    }
}

fn largest_controls() -> Vec<Control> {
    vec![
        Control::Ack { position: u64::MAX, seq: u64::MAX },
        Control::DoorbellRequest { armed: true, position: u64::MAX },
        Control::Bye,
        Control::Doorbell { tail: u64::MAX },
        Control::Dropped { reason: DropReason::TooSlow { lag: u64::MAX } },
        Control::Dropped { reason: DropReason::ProtocolViolation },
        Control::Dropped { reason: DropReason::ShuttingDown },
        Control::EndOfStream { final_seq: u64::MAX },
        Control::CreditWanted { position: u64::MAX },
        Control::ReadsInPlace,
        Control::DoorbellRecords { position: u64::MAX, tail: u64::MAX },
    ]
}

fn v6() -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0xffff, 1, 2, 3, 4, 5, 6, 7), 65535, 0, 0))
}

#[test]
fn connect_roundtrip_fits_in_56_bytes() {
    let c = largest_connect();
    let b = c.encode().unwrap();
    assert!(b.len() <= MAX_CONNECT_PRIVATE_DATA, "{} bytes", b.len());
    assert_eq!(ConnectData::decode(&b).unwrap(), c);
    // A real proof is as long: the same 56 bytes.
    let secret = Secret::new(vec![7; 64]).unwrap();
    let proven = largest_unproven_connect().with_proof(&secret, u64::MAX, u64::MAX).unwrap();
    assert_eq!(proven.encode().unwrap().len(), b.len());
    assert_eq!(b.len(), 56, "the layout documented at ConnectData::encode");
    assert_eq!(largest_unproven_connect().encode().unwrap().len(), 24, "a proof adds 32 bytes");
    let small = ConnectData {
        topic: TopicId::of("t"),
        start: StartAt::Latest,
        accepts: PolicySet::of(&[PolicyKind::Block]),
        node_id: 1,
        flags: ConnectFlags::NONE,
        auth: ConnectAuth::None,
    };
    assert_eq!(ConnectData::decode(&small.encode().unwrap()).unwrap(), small);
    assert!(small.accepts.contains(PolicyKind::Block) && !small.accepts.contains(PolicyKind::Overwrite));
    assert!(PolicySet::NONE.with(PolicyKind::DropSlow).contains(PolicyKind::DropSlow));
}

#[test]
fn policy_kinds_keep_their_wire_encoding_and_bits() {
    let encode = |k: PolicyKind| bincode::serde::encode_to_vec(k, bincode::config::standard()).unwrap();
    let kinds = [PolicyKind::Block, PolicyKind::DropSlow, PolicyKind::Overwrite];
    assert_eq!(kinds.map(encode), [vec![0], vec![1], vec![2]]);
    assert_eq!(kinds.map(|k| u8::from(PolicySet::of(&[k]))), [1, 2, 4]);
}

#[test]
fn accept_roundtrip_fits_in_196_bytes() {
    let a = largest_accept();
    let b = a.encode().unwrap();
    assert!(b.len() <= MAX_ACCEPT_PRIVATE_DATA, "{} bytes", b.len());
    assert_eq!(AcceptData::decode(&b).unwrap(), a);
    let sp = a.start_point();
    assert_eq!((sp.position, sp.seq, sp.first_seq), (u64::MAX, u64::MAX, u64::MAX));
    assert_eq!(a.reader_config(99).max_message_len, 99);
}

#[test]
fn reject_detail_is_truncated_to_fit_148_bytes() {
    let long = "é".repeat(500);
    let r = RejectData::new(RejectCode::TooManySubscribers, &long);
    assert!(r.detail.len() <= MAX_REJECT_DETAIL && r.detail.len() >= MAX_REJECT_DETAIL - 1);
    let b = r.encode().unwrap();
    assert!(b.len() <= MAX_REJECT_PRIVATE_DATA, "{} bytes", b.len());
    assert_eq!(RejectData::decode(&b).unwrap(), r);
    // Encoding a hand-built reject with an oversized detail truncates too.
    let raw = RejectData { reason: RejectCode::ShuttingDown, detail: "x".repeat(1000) };
    let back = RejectData::decode(&raw.encode().unwrap()).unwrap();
    assert_eq!(back.detail.len(), MAX_REJECT_DETAIL);
    for code in [
        RejectCode::UnknownTopic,
        RejectCode::VersionMismatch,
        RejectCode::Malformed,
        RejectCode::PolicyNotAccepted,
        RejectCode::TooManySubscribers,
        RejectCode::ShuttingDown,
        RejectCode::Unauthorized,
    ] {
        let r = RejectData::new(code, "why");
        assert_eq!(RejectData::decode(&r.encode().unwrap()).unwrap(), r);
    }
}

#[test]
fn control_messages_fit_the_receive_buffer() {
    for c in largest_controls() {
        let b = c.encode().unwrap();
        assert!(b.len() <= CONTROL_MSG_MAX, "{c:?}: {} bytes", b.len());
        assert_eq!(Control::decode(&b).unwrap(), c);
    }
}

#[test]
fn private_data_padding_is_accepted_but_not_garbage() {
    let mut b = largest_connect().encode().unwrap();
    b.resize(MAX_CONNECT_PRIVATE_DATA, 0);
    assert_eq!(ConnectData::decode(&b).unwrap(), largest_connect());
    let mut b = largest_accept().encode().unwrap();
    b.resize(MAX_ACCEPT_PRIVATE_DATA, 0);
    assert_eq!(AcceptData::decode(&b).unwrap(), largest_accept());
    let r = RejectData::new(RejectCode::UnknownTopic, "no such topic");
    let mut b = r.encode().unwrap();
    b.resize(MAX_REJECT_PRIVATE_DATA, 0);
    assert_eq!(RejectData::decode(&b).unwrap(), r);
    let last = b.len() - 1;
    b[last] = 1;
    assert!(matches!(RejectData::decode(&b), Err(ProtocolError::Malformed { .. })));
}

#[test]
fn version_kind_and_truncation_errors() {
    let b = largest_connect().encode().unwrap();
    let mut other = b.clone();
    other[0] = PROTOCOL_VERSION + 1;
    assert!(
        matches!(ConnectData::decode(&other), Err(ProtocolError::VersionMismatch { got, expected: PROTOCOL_VERSION, .. }) if got == PROTOCOL_VERSION + 1)
    );
    assert!(matches!(AcceptData::decode(&b), Err(ProtocolError::WrongKind { .. })));
    assert!(matches!(ConnectData::decode(&[]), Err(ProtocolError::Truncated { len: 0, .. })));
    assert!(matches!(ConnectData::decode(&[PROTOCOL_VERSION]), Err(ProtocolError::Truncated { .. })));
    assert!(matches!(ConnectData::decode(&[0; 57]), Err(ProtocolError::TooLarge { .. })));
    // A length prefix claiming far more than the input is refused without allocating it.
    let mut huge = vec![PROTOCOL_VERSION, 5];
    huge.extend_from_slice(&[0, 1, 1, 0, 127, 0, 0, 1, 0, 0, 0, 1, 253]);
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(Announcement::decode(&huge), Err(ProtocolError::Malformed { .. })));
    for cut in 2..b.len() {
        assert!(ConnectData::decode(&b[..cut]).is_err(), "truncated to {cut}");
    }
    let a = largest_accept().encode().unwrap();
    for cut in 0..a.len() {
        assert!(AcceptData::decode(&a[..cut]).is_err(), "truncated to {cut}");
    }
    // Unknown policy or flag bits, and a proof marker other than 0 or 1, are refused.
    let mut bad = ConnectData { accepts: PolicySet::NONE, ..largest_unproven_connect() }.encode().unwrap();
    let pos = bad.len() - 1 - 1 - 9 - 1; // proof(1) flags(1) node_id(9) accepts(1)
    assert_eq!(bad[pos], 0);
    bad[pos] = 0x80;
    assert!(matches!(ConnectData::decode(&bad), Err(ProtocolError::Malformed { .. })));
    let mut bad = largest_unproven_connect().encode().unwrap();
    let flags = bad.len() - 2;
    bad[flags] = 0x40;
    assert!(matches!(ConnectData::decode(&bad), Err(ProtocolError::Malformed { .. })));
    let mut bad = largest_connect().encode().unwrap();
    let marker = bad.len() - 33;
    assert_eq!(bad[marker], 1);
    bad[marker] = 2;
    assert!(matches!(ConnectData::decode(&bad), Err(ProtocolError::Malformed { .. })));
}

#[test]
fn announcement_roundtrip_and_part_check() {
    let a = Announcement {
        kind: AnnounceKind::Heartbeat,
        domain: 232,
        node_id: 9,
        epoch: 3,
        connect: v6(),
        part: 0,
        parts: 1,
        topics: vec![("prices".into(), TopicId::of("prices"))],
    };
    assert_eq!(Announcement::decode(&a.encode().unwrap()).unwrap(), a);
    let bad = Announcement { part: 1, ..a };
    assert!(matches!(Announcement::decode(&bad.encode().unwrap()), Err(ProtocolError::Malformed { .. })));
}

#[test]
fn announcement_split_packs_many_long_topics_under_the_mtu() {
    let topics: Vec<(String, TopicId)> = (0..2000)
        .map(|i| {
            let name = format!("{}-{i}", "segment/".repeat(i % 60));
            let id = TopicId::of(&name);
            (name, id)
        })
        .collect();
    for kind in [AnnounceKind::Hello, AnnounceKind::Heartbeat, AnnounceKind::Goodbye] {
        let parts = Announcement::split(kind, 0, u64::MAX, u64::MAX, v6(), &topics, ANNOUNCE_MTU).unwrap();
        assert!(parts.len() > 1);
        let mut back = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let b = p.encode().unwrap();
            assert!(b.len() <= ANNOUNCE_MTU, "part {i}: {} bytes", b.len());
            let d = Announcement::decode(&b).unwrap();
            assert_eq!((d.part as usize, d.parts as usize, d.kind), (i, parts.len(), kind));
            back.extend(d.topics);
        }
        assert_eq!(back, topics);
        // Packing is tight: no two consecutive parts could have been merged.
        let sizes: Vec<usize> = parts.iter().map(|p| p.encode().unwrap().len()).collect();
        assert!(sizes.windows(2).all(|w| w[0] + w[1] > ANNOUNCE_MTU));
    }
    let one = Announcement::split(AnnounceKind::Goodbye, 0, 1, 1, v6(), &[], ANNOUNCE_MTU).unwrap();
    assert_eq!((one.len(), one[0].parts, one[0].topics.len()), (1, 1, 0));
    let huge = vec![("x".repeat(2000), TopicId(1))];
    assert!(matches!(
        Announcement::split(AnnounceKind::Hello, 0, 1, 1, v6(), &huge, ANNOUNCE_MTU),
        Err(ProtocolError::TooLarge { .. })
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300), version_ok in any::<bool>(), kind in 0u8..7) {
        let mut bytes = bytes;
        if version_ok && bytes.len() >= 2 {
            bytes[0] = PROTOCOL_VERSION;
            bytes[1] = kind;
        }
        let _ = ConnectData::decode(&bytes);
        let _ = AcceptData::decode(&bytes);
        let _ = RejectData::decode(&bytes);
        let _ = Control::decode(&bytes);
        let _ = Announcement::decode(&bytes);
    }

    #[test]
    fn connect_roundtrips(
        topic in any::<u64>(),
        node in any::<u64>(),
        earliest in any::<bool>(),
        bits in 0u8..8,
        doorbells in any::<bool>(),
        proof in prop::option::of((any::<u64>(), any::<u64>(), any::<[u8; PROOF_TAG_LEN]>())),
    ) {
        let c = ConnectData {
            topic: TopicId(topic),
            start: if earliest { StartAt::Earliest } else { StartAt::Latest },
            accepts: PolicySet::try_from(bits).unwrap(),
            node_id: node,
            flags: if doorbells { ConnectFlags::WANTS_DOORBELLS } else { ConnectFlags::NONE },
            auth: proof.map_or(ConnectAuth::None, |(nonce, timestamp_ms, tag)| ConnectAuth::Proof(Proof { nonce, timestamp_ms, tag })),
        };
        let b = c.encode().unwrap();
        prop_assert!(b.len() <= MAX_CONNECT_PRIVATE_DATA);
        prop_assert_eq!(ConnectData::decode(&b).unwrap(), c);
    }

    #[test]
    fn control_roundtrips(a in any::<u64>(), b in any::<u64>(), armed in any::<bool>(), which in 0usize..7) {
        let c = match which {
            0 => Control::Ack { position: a, seq: b },
            1 => Control::DoorbellRequest { armed, position: a },
            2 => Control::Bye,
            3 => Control::Doorbell { tail: a },
            4 => Control::Dropped { reason: DropReason::TooSlow { lag: b } },
            5 => Control::DoorbellRecords { position: a, tail: b },
            _ => Control::EndOfStream { final_seq: a },
        };
        prop_assert_eq!(Control::decode(&c.encode().unwrap()).unwrap(), c);
    }
}

/// Only a `DoorbellRecords` carries records after its padded message, up to
/// `DOORBELL_MSG_MAX` bytes and never past its tail; every other control message is at most
/// `CONTROL_MSG_MAX` bytes.
#[test]
fn only_a_doorbell_with_records_is_longer_than_a_control_message() {
    let doorbell = Control::DoorbellRecords { position: 1024, tail: 1024 + 96 };
    assert_eq!(doorbell.records_len(40).unwrap(), 0, "no records");
    assert_eq!(doorbell.records_len(CONTROL_MSG_MAX).unwrap(), 0, "padded, no records");
    assert_eq!(doorbell.records_len(CONTROL_MSG_MAX + 96).unwrap(), 96);
    assert!(matches!(doorbell.records_len(CONTROL_MSG_MAX + 128), Err(ProtocolError::Malformed { .. })));
    let wide = Control::DoorbellRecords { position: 0, tail: u64::MAX };
    assert_eq!(wide.records_len(DOORBELL_MSG_MAX).unwrap(), DOORBELL_RECORDS_MAX);
    assert!(matches!(wide.records_len(DOORBELL_MSG_MAX + 1), Err(ProtocolError::TooLarge { .. })));
    let behind = Control::DoorbellRecords { position: 10, tail: 5 };
    assert!(matches!(behind.records_len(CONTROL_MSG_MAX + 1), Err(ProtocolError::Malformed { .. })));
    for other in largest_controls().into_iter().filter(|c| !matches!(c, Control::DoorbellRecords { .. })) {
        assert_eq!(other.records_len(CONTROL_MSG_MAX).unwrap(), 0);
        assert!(matches!(other.records_len(CONTROL_MSG_MAX + 1), Err(ProtocolError::TooLarge { .. })), "{other:?}");
    }
    // The message padded to CONTROL_MSG_MAX decodes as itself.
    let mut padded = doorbell.encode().unwrap();
    padded.resize(CONTROL_MSG_MAX, 0);
    assert_eq!(Control::decode(&padded).unwrap(), doorbell);
}

#[test]
fn absent_private_data_padded_with_zeros_is_truncated_not_another_version() {
    // librdmacm delivers an empty connect private data as 56 zero bytes.
    for len in [2, 8, MAX_CONNECT_PRIVATE_DATA] {
        assert!(matches!(ConnectData::decode(&vec![0; len]), Err(ProtocolError::Truncated { len: 0, .. })));
    }
}

#[test]
fn accept_tags_answer_the_challenge_under_each_secret_and_nothing_else_passes() {
    let domain = Secret::new(vec![1; 32]).unwrap();
    let credential = Secret::new(vec![2; 32]).unwrap();
    let other = Secret::new(vec![3; 32]).unwrap();
    let accept = AcceptData { tags: AcceptTags::default(), ..largest_accept() };
    let tagged = accept.clone().with_tags(Some(7), Some(&domain), Some(&credential));
    let id = accept.publisher_id;
    assert_eq!(tagged.check_tags(Some(7), Some(&domain), Some(&credential), Some(id)), Ok(()));
    assert_eq!(tagged.check_tags(Some(7), None, None, None), Ok(()), "a subscriber without secrets checks nothing");
    // Encoded and decoded, the tags still verify: they cover the bytes, not the struct.
    let decoded = AcceptData::decode(&tagged.encode().unwrap()).unwrap();
    assert_eq!(decoded.check_tags(Some(7), Some(&domain), Some(&credential), None), Ok(()));

    assert_eq!(
        tagged.check_tags(Some(8), Some(&domain), None, None),
        Err(AcceptAuthError::NodeTagInvalid),
        "another challenge: a replayed accept"
    );
    assert_eq!(tagged.check_tags(Some(7), Some(&other), None, None), Err(AcceptAuthError::NodeTagInvalid));
    assert_eq!(tagged.check_tags(Some(7), None, Some(&other), None), Err(AcceptAuthError::TopicTagInvalid));
    let altered = AcceptData { start_position: 1, ..tagged.clone() };
    assert_eq!(
        altered.check_tags(Some(7), Some(&domain), None, None),
        Err(AcceptAuthError::NodeTagInvalid),
        "tags cover every field"
    );
    assert_eq!(
        tagged.check_tags(Some(7), Some(&domain), None, Some(id ^ 1)),
        Err(AcceptAuthError::NotTheAnnouncedPublisher { expected: id ^ 1, got: id })
    );

    let untagged = accept.with_tags(None, Some(&domain), Some(&credential));
    assert_eq!(untagged.tags, AcceptTags::default(), "no challenge, no tag");
    assert_eq!(untagged.check_tags(Some(7), Some(&domain), None, None), Err(AcceptAuthError::NodeTagMissing));
    assert_eq!(untagged.check_tags(Some(7), None, Some(&credential), None), Err(AcceptAuthError::TopicTagMissing));
    // No challenge sent (a subscriber without secrets): only the announced publisher is checked.
    assert_eq!(tagged.check_tags(None, None, None, Some(id)), Ok(()));
    assert_eq!(
        tagged.check_tags(None, None, None, Some(id ^ 1)),
        Err(AcceptAuthError::NotTheAnnouncedPublisher { expected: id ^ 1, got: id })
    );
    assert_eq!(
        tagged.check_tags(None, Some(&domain), None, None),
        Err(AcceptAuthError::NodeTagInvalid),
        "no challenge, nothing verifies"
    );
}

#[test]
fn the_challenge_is_the_proofs_nonce_or_the_challenges_and_fits_the_connect_data() {
    let secret = Secret::new(vec![4; 32]).unwrap();
    let plain = largest_unproven_connect();
    assert_eq!(plain.challenge(), None);
    let challenged = plain.with_challenge(u64::MAX - 1);
    assert_eq!(challenged.challenge(), Some(u64::MAX - 1));
    assert!(challenged.encode().unwrap().len() <= MAX_CONNECT_PRIVATE_DATA);
    assert_eq!(ConnectData::decode(&challenged.encode().unwrap()).unwrap(), challenged);
    let proven = plain.with_proof(&secret, 42, 1).unwrap();
    assert_eq!(proven.challenge(), Some(42));
    assert!(proven.proof().is_some() && challenged.proof().is_none());
}
