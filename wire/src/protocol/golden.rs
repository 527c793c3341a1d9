//! Golden bytes: every message kind encoded from fixed values, compared byte for byte with
//! what this protocol version sends. A change of layout (a field added, moved or re-typed, an
//! enum variant reordered) fails here; it must come with a new [`PROTOCOL_VERSION`], whose
//! bump fails [`the_goldens_are_of_this_protocol_version`] until the goldens are renewed.

use std::net::{Ipv4Addr, SocketAddr};

use super::*;
use crate::ring::Checksum;
use rdma_fabric::RemoteAddr;

/// The protocol version the goldens below were taken from.
const GOLDEN_VERSION: u8 = 5;

/// A fixed secret (the credential and the domain secret of the goldens).
fn secret() -> Secret {
    Secret::new(*b"golden secret of sixteen+ bytes").expect("a valid secret")
}

fn connect() -> ConnectData {
    ConnectData {
        topic: TopicId::of("golden"),
        start: StartAt::Earliest,
        accepts: PolicySet::of(&[PolicyKind::Block, PolicyKind::Overwrite]),
        node_id: 0x0102_0304_0506_0708,
        flags: ConnectFlags::WANTS_DOORBELLS,
        auth: ConnectAuth::None,
    }
}

fn accept() -> AcceptData {
    AcceptData {
        topic: TopicId::of("golden"),
        ring: RemoteAddr { addr: 0x7f00_1234_5000, rkey: 0xdead_beef },
        region_len: 4096 + (1 << 20),
        capacity: 1 << 20,
        epoch: 3,
        publisher_id: 0x0102_0304_0506_0708,
        policy: PolicyKind::DropSlow,
        max_record_payload: 65_504,
        start_position: (1 << 20) + 96,
        start_seq: 7,
        first_seq: 8,
        checksum: Checksum::XxHash64,
        message_type: Some(MessageTypeTag::new(0x0102_0304_0506_0708, "golden::Quote")),
        tags: AcceptTags { node: Some([0xa5; PROOF_TAG_LEN]), topic: None },
    }
}

/// Every control message, named.
fn controls() -> Vec<(&'static str, Control)> {
    vec![
        ("ack", Control::Ack { position: 1_048_672, seq: 9 }),
        ("doorbell request", Control::DoorbellRequest { armed: true, position: 300 }),
        ("bye", Control::Bye),
        ("doorbell", Control::Doorbell { tail: 250 }),
        ("dropped too slow", Control::Dropped { reason: DropReason::TooSlow { lag: 1 << 20 } }),
        ("dropped protocol violation", Control::Dropped { reason: DropReason::ProtocolViolation }),
        ("dropped shutting down", Control::Dropped { reason: DropReason::ShuttingDown }),
        ("dropped idle", Control::Dropped { reason: DropReason::Idle { millis: 30_000 } }),
        ("end of stream", Control::EndOfStream { final_seq: 42 }),
        ("credit wanted", Control::CreditWanted { position: 251 }),
        ("doorbell records", Control::DoorbellRecords { position: 300, tail: 396 }),
    ]
}

fn announcement() -> Announcement {
    Announcement {
        kind: AnnounceKind::Heartbeat,
        domain: 7,
        node_id: 0x0102_0304_0506_0708,
        epoch: 3,
        connect: SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 7471)),
        part: 0,
        parts: 1,
        topics: vec![("golden".into(), TopicId::of("golden"))],
    }
}

fn listing_accept() -> ListingAccept {
    ListingAccept {
        node_id: 0x0102_0304_0506_0708,
        epoch: 3,
        region: RemoteAddr { addr: 0x7f00_1234_6000, rkey: 0xfeed_f00d },
        region_len: LISTING_REGION_LEN as u32,
        tag: Some([0x5a; PROOF_TAG_LEN]),
    }
}

fn topic_listing() -> TopicListing {
    let topics = [("golden/b", 4), ("golden/a", 2)].map(|(name, instance)| ListedTopic { name: name.into(), instance });
    TopicListing::fitted(0x0102_0304_0506_0708, 3, 9, topics)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every encoding the goldens pin, named.
fn encodings() -> Vec<(String, Vec<u8>)> {
    let mut all = vec![
        ("connect".to_string(), connect().encode().expect("encode")),
        (
            "connect with proof".to_string(),
            connect()
                .with_proof(&secret(), 0x1111_2222_3333_4444, 1_700_000_000_000)
                .expect("proof")
                .encode()
                .expect("encode"),
        ),
        (
            "connect with challenge".to_string(),
            connect().with_challenge(0x5555_6666_7777_8888).encode().expect("encode"),
        ),
        ("accept".to_string(), accept().encode().expect("encode")),
        (
            "listing connect".to_string(),
            ConnectData { flags: ConnectFlags::LISTING, topic: TopicId(0), ..connect() }.encode().expect("encode"),
        ),
        ("listing accept".to_string(), listing_accept().encode().expect("encode")),
        ("topic listing".to_string(), topic_listing().encode_region().expect("encode")),
        ("reject".to_string(), RejectData::new(RejectCode::Unauthorized, "stale proof").encode().expect("encode")),
        ("announcement".to_string(), announcement().encode().expect("encode")),
        ("sealed announcement".to_string(), announcement().seal(&secret(), 5, 1_700_000_000_000).expect("seal")),
    ];
    all.extend(controls().into_iter().map(|(name, c)| (name.to_string(), c.encode().expect("encode"))));
    all
}

/// The bytes this protocol version sends for each of [`encodings`], as hex.
const GOLDENS: &[(&str, &str)] = &[
    ("connect", "0501fdc4d937fe8ec8722b0105fd08070605040302010100"),
    ("connect with proof", "0501fdc4d937fe8ec8722b0105fd0807060504030201010144443333222211110068e5cf8b0100005189424f4583d52d1865307bf908bbba"),
    ("connect with challenge", "0501fdc4d937fe8ec8722b0105fd080706050403020101028888777766665555"),
    ("accept", "0502fdc4d937fe8ec8722bfd00503412007f0000fcefbeaddefc00101000fc0000100003fd080706050403020101fbe0fffc6000100007080101fd08070605040302010d676f6c64656e3a3a51756f746501a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a500"),
    ("listing connect", "0501000105fd08070605040302010200"),
    ("listing accept", "0507fd080706050403020103fd00603412007f0000fc0df0edfefc00000100015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"),
    ("topic listing", "0900000000000000230000004967cf5e0508fd08070605040302010309000208676f6c64656e2f610208676f6c64656e2f6204"),
    ("reject", "0503060b7374616c652070726f6f66"),
    ("announcement", "05050107fd080706050403020103000a000002fb2f1d00010106676f6c64656efdc4d937fe8ec8722b"),
    ("sealed announcement", "050605000000000000000068e5cf8b01000005050107fd080706050403020103000a000002fb2f1d00010106676f6c64656efdc4d937fe8ec8722b5b98d5eb6fca78dbc815ede2ca5cfdbc"),
    ("ack", "050400fc6000100009"),
    ("doorbell request", "05040101fb2c01"),
    ("bye", "050402"),
    ("doorbell", "050403fa"),
    ("dropped too slow", "05040400fc00001000"),
    ("dropped protocol violation", "05040401"),
    ("dropped shutting down", "05040402"),
    ("dropped idle", "05040403fb3075"),
    ("end of stream", "0504052a"),
    ("credit wanted", "050406fbfb00"),
    ("doorbell records", "050408fb2c01fb8c01"),
];

#[test]
fn the_goldens_are_of_this_protocol_version() {
    assert_eq!(
        PROTOCOL_VERSION, GOLDEN_VERSION,
        "the protocol version changed: renew GOLDENS from `encodings()` (print them as hex) and GOLDEN_VERSION"
    );
}

#[test]
fn every_message_kind_encodes_to_its_golden_bytes() {
    let encoded = encodings();
    let names: Vec<&str> = encoded.iter().map(|(name, _)| name.as_str()).collect();
    let golden_names: Vec<&str> = GOLDENS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, golden_names, "every encoding has its golden, in order");
    for ((name, bytes), (_, golden)) in encoded.iter().zip(GOLDENS) {
        assert_eq!(hex(bytes), *golden, "{name}: the layout changed without a new PROTOCOL_VERSION");
    }
}

#[test]
fn the_golden_bytes_decode_to_their_values() {
    let bytes = |name: &str| {
        let (_, golden) = GOLDENS.iter().find(|(n, _)| *n == name).expect("a golden of that name");
        (0..golden.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&golden[i..i + 2], 16).expect("hex"))
            .collect::<Vec<u8>>()
    };
    assert_eq!(ConnectData::decode(&bytes("connect")).expect("decode"), connect());
    assert_eq!(AcceptData::decode(&bytes("accept")).expect("decode"), accept());
    let listing_connect = ConnectData::decode(&bytes("listing connect")).expect("decode");
    assert!(listing_connect.flags.contains(ConnectFlags::LISTING));
    assert_eq!(ListingAccept::decode(&bytes("listing accept")).expect("decode"), listing_accept());
    assert_eq!(TopicListing::decode_region(&bytes("topic listing")).expect("decode"), topic_listing());
    assert_eq!(
        RejectData::decode(&bytes("reject")).expect("decode"),
        RejectData::new(RejectCode::Unauthorized, "stale proof")
    );
    assert_eq!(Announcement::decode(&bytes("announcement")).expect("decode"), announcement());
    let opened = Announcement::open(&bytes("sealed announcement"), &secret()).expect("open");
    assert_eq!((opened.announcement, opened.seq, opened.sent_ms), (announcement(), 5, 1_700_000_000_000));
    for (name, c) in controls() {
        assert_eq!(Control::decode(&bytes(name)).expect("decode"), c, "{name}");
    }
}
