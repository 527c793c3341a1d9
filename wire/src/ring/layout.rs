//! The ring's memory layout: a control block followed by the data area, and the 32-byte record
//! header. Everything is little-endian; positions are absolute byte counts that never wrap, so
//! the `position` a record header carries identifies its lap.
//!
//! ```text
//!  region: | control block (CONTROL_SIZE = 4096 bytes) | data area (capacity bytes, a power of two) |
//!
//!  control block, each field a little-endian u64 written atomically (offsets in [`ctrl`]):
//!   0       8       16       24      32     40         48     56         64                   72      80
//!  +-------+-------+--------+-------+------+----------+------+----------+--------------------+-------+
//!  | magic |version|capacity| epoch | tail | tail_seq | head | head_seq | max_record_payload | floor |
//!  +-------+-------+--------+-------+------+----------+------+----------+--------------------+-------+
//!  (the rest of the 4096 bytes is zero; a subscriber READs the first CONTROL_READ_LEN = 80)
//!
//!  data area: records at absolute positions that never wrap; position p lives at offset
//!  CONTROL_SIZE + (p mod capacity). Each record is a RecordHeader and its payload, padded to 32.
//! ```
#![allow(clippy::missing_errors_doc, reason = "the ring's own layer")]

use super::checksum::{Checksum, RecordCrc};
use super::error::RingError;

/// Size of the control block that precedes the data area.
pub const CONTROL_SIZE: usize = 4096;
/// Bytes of the control block that carry fields (what a subscriber READs to learn head and tail).
pub const CONTROL_READ_LEN: usize = 80;
/// Size of a record header.
pub const HEADER_LEN: usize = 32;
/// Alignment of every record's absolute position.
pub const RECORD_ALIGN: u64 = 32;
/// Smallest data-area capacity.
pub const MIN_CAPACITY: usize = 64 * 1024;
/// Smallest `max_record_payload`.
pub const MIN_RECORD_PAYLOAD: usize = 64;
/// `"RDMAPSR1"`: the first word of every ring's control block.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RDMAPSR1");
/// Version of this layout.
pub const LAYOUT_VERSION: u64 = 1;

/// Offsets of the control-block fields (each a little-endian u64 written atomically).
pub mod ctrl {
    /// [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// [`super::LAYOUT_VERSION`].
    pub const VERSION: usize = 8;
    /// Data-area capacity in bytes.
    pub const CAPACITY: usize = 16;
    /// Publisher epoch.
    pub const EPOCH: usize = 24;
    /// Absolute position after the last committed record.
    pub const TAIL: usize = 32;
    /// Sequence number the record written at `tail` will carry.
    pub const TAIL_SEQ: usize = 40;
    /// Absolute position of the oldest retained record.
    pub const HEAD: usize = 48;
    /// Sequence number of the record at `head`.
    pub const HEAD_SEQ: usize = 56;
    /// Largest payload of one record.
    pub const MAX_RECORD_PAYLOAD: usize = 64;
    /// Every byte below this absolute position may have been overwritten by a later lap
    /// (raised before the producer writes over it).
    pub const FLOOR: usize = 72;
}

/// Record flag: first fragment of a message.
pub const FLAG_FIRST: u16 = 1;
/// Record flag: last fragment of a message.
pub const FLAG_LAST: u16 = 2;
/// Offset in a record header of the word holding `len` and `flags` ([`RecordHeader::words`]).
pub const LEN_WORD: usize = 16;
/// Record flag: filler up to the end of the data area (no message data).
pub const FLAG_PADDING: u16 = 4;
/// Record flag: the record carries no checksum (`crc` is 0): written while every subscriber
/// read the ring in place. A reader of READs takes it for torn (never delivers it); padding
/// always carries its checksum.
pub const FLAG_NO_CHECKSUM: u16 = 8;

/// Length of the region holding a ring of `capacity` data bytes.
pub fn region_len(capacity: usize) -> usize {
    CONTROL_SIZE + capacity
}

/// Bytes a record with `payload_len` payload bytes occupies (header + payload, 32-aligned).
pub fn record_size(payload_len: usize) -> u64 {
    (HEADER_LEN as u64 + payload_len as u64).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Offset inside the region of absolute `position` in a ring of `capacity` (a power of two).
pub fn data_offset(position: u64, capacity: usize) -> usize {
    CONTROL_SIZE + (position & (capacity as u64 - 1)) as usize
}

/// Bytes from `position` to the end of the data area.
pub fn room_to_end(position: u64, capacity: usize) -> u64 {
    capacity as u64 - (position & (capacity as u64 - 1))
}

/// Checks a capacity / max record payload pair.
pub fn check_geometry(capacity: usize, max_record_payload: usize) -> Result<(), RingError> {
    if !capacity.is_power_of_two() || capacity < MIN_CAPACITY {
        return Err(RingError::InvalidConfig(format!(
            "capacity {capacity} must be a power of two of at least {MIN_CAPACITY}"
        )));
    }
    // A record plus the padding that may precede it must fit in the ring, and its length in
    // the header's u32.
    let max = (capacity / 2 - HEADER_LEN).min(u32::MAX as usize);
    if !(MIN_RECORD_PAYLOAD..=max).contains(&max_record_payload) {
        return Err(RingError::InvalidConfig(format!(
            "max_record_payload {max_record_payload} must be in {MIN_RECORD_PAYLOAD}..={max} for capacity {capacity}"
        )));
    }
    Ok(())
}

/// The default largest record payload for `capacity`: a record fills a quarter of the ring
/// (at most a u32's worth). Any capacity gives an answer, even one [`check_geometry`] refuses.
pub fn default_max_record_payload(capacity: usize) -> usize {
    (capacity / 4).saturating_sub(HEADER_LEN).min(u32::MAX as usize)
}

/// A decoded record header: the 32 bytes before each record's payload.
///
/// ```text
///   0          8          16     20      22         24          28     32
///  +----------+----------+------+-------+----------+-----------+------+-- payload (len bytes),
///  | position |   seq    | len  | flags | reserved | total_len | crc  |   then zeros up to the
///  |   u64    |   u64    | u32  |  u16  |   u16    |    u32    | u32  |   next 32-byte boundary
///  +----------+----------+------+-------+----------+-----------+------+--
/// ```
///
/// Little-endian. `crc` covers the header (with `crc = 0`) and the payload; a padding record
/// ([`FLAG_PADDING`]) fills the data area up to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// The record's own absolute position.
    pub position: u64,
    /// Message sequence number (padding carries the sequence of the record that follows it).
    pub seq: u64,
    /// Payload bytes in this record.
    pub len: u32,
    /// [`FLAG_FIRST`], [`FLAG_LAST`], [`FLAG_PADDING`].
    pub flags: u16,
    /// Zero.
    pub reserved: u16,
    /// Length of the whole message (written on every fragment).
    pub total_len: u32,
    /// The ring's [`Checksum`] over the header with `crc = 0` followed by the payload.
    pub crc: u32,
}

impl RecordHeader {
    /// Encodes into 32 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        for (bytes, word) in b.chunks_exact_mut(8).zip(self.words()) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        b
    }

    /// The header's four words as values, in the order [`encode`](Self::encode) lays them out
    /// little-endian: `position`, `seq`, `len | flags << 32 | reserved << 48`,
    /// `total_len | crc << 32` (computed in registers: a writer storing them word by word reads
    /// no bytes back from memory).
    pub fn words(&self) -> [u64; HEADER_LEN / 8] {
        [
            self.position,
            self.seq,
            u64::from(self.len) | u64::from(self.flags) << 32 | u64::from(self.reserved) << 48,
            u64::from(self.total_len) | u64::from(self.crc) << 32,
        ]
    }

    /// The `len` and `flags` of a header from its third word ([`LEN_WORD`] bytes in), as a
    /// reader that loads that word alone sees them.
    pub fn len_and_flags(word: u64) -> (u32, u16) {
        (word as u32, (word >> 32) as u16)
    }

    /// Decodes the first 32 bytes of `b` (`None` if shorter).
    pub fn decode(b: &[u8]) -> Option<RecordHeader> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"));
        Some(RecordHeader {
            position: u64_at(0),
            seq: u64_at(8),
            len: u32_at(16),
            flags: u16_at(20),
            reserved: u16_at(22),
            total_len: u32_at(24),
            crc: u32_at(28),
        })
    }

    /// The `checksum` of this header (its `crc` field taken as 0) with `payload` appended.
    pub fn compute_crc(&self, checksum: Checksum, payload: &[u8]) -> u32 {
        let mut h = *self;
        h.crc = 0;
        checksum.of_pair(&h.encode(), payload)
    }

    /// The `checksum` computation over the header with `crc = 0`, to continue with the
    /// payload in pieces ([`RecordCrc::update`]).
    pub fn crc_start(&self, checksum: Checksum) -> RecordCrc {
        let mut h = *self;
        h.crc = 0;
        let mut crc = checksum.start(HEADER_LEN + self.len as usize);
        crc.update(&h.encode());
        crc
    }

    /// Whether this is a padding record.
    pub fn is_padding(&self) -> bool {
        self.flags & FLAG_PADDING != 0
    }

    /// Whether this is the first fragment of a message.
    pub fn is_first(&self) -> bool {
        self.flags & FLAG_FIRST != 0
    }

    /// Whether this is the last fragment of a message.
    pub fn is_last(&self) -> bool {
        self.flags & FLAG_LAST != 0
    }

    /// Bytes this record occupies in the ring.
    pub fn size(&self) -> u64 {
        record_size(self.len as usize)
    }
}

/// A decoded copy of the control block, as a subscriber READs it (fields may come from
/// different moments when the READ races the producer: validate before trusting them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControlSnapshot {
    /// [`MAGIC`] when valid.
    pub magic: u64,
    /// [`LAYOUT_VERSION`] when compatible.
    pub version: u64,
    /// Data-area capacity.
    pub capacity: u64,
    /// Publisher epoch.
    pub epoch: u64,
    /// Absolute position after the last committed record.
    pub tail: u64,
    /// Sequence the record written at `tail` will carry.
    pub tail_seq: u64,
    /// Absolute position of the oldest retained record.
    pub head: u64,
    /// Sequence of the record at `head`.
    pub head_seq: u64,
    /// Largest payload of one record.
    pub max_record_payload: u64,
    /// Every byte below this absolute position may have been overwritten.
    pub floor: u64,
}

impl ControlSnapshot {
    /// Decodes the first [`CONTROL_READ_LEN`] bytes of a control-block copy.
    pub fn decode(b: &[u8]) -> Result<ControlSnapshot, RingError> {
        if b.len() < CONTROL_READ_LEN {
            return Err(RingError::BadControl(format!("{} bytes, need {CONTROL_READ_LEN}", b.len())));
        }
        let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let s = ControlSnapshot {
            magic: w(ctrl::MAGIC),
            version: w(ctrl::VERSION),
            capacity: w(ctrl::CAPACITY),
            epoch: w(ctrl::EPOCH),
            tail: w(ctrl::TAIL),
            tail_seq: w(ctrl::TAIL_SEQ),
            head: w(ctrl::HEAD),
            head_seq: w(ctrl::HEAD_SEQ),
            max_record_payload: w(ctrl::MAX_RECORD_PAYLOAD),
            floor: w(ctrl::FLOOR),
        };
        if s.magic != MAGIC {
            return Err(RingError::BadControl(format!("magic {:#x}", s.magic)));
        }
        if s.version != LAYOUT_VERSION {
            return Err(RingError::BadControl(format!("layout version {} (expected {LAYOUT_VERSION})", s.version)));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::checksum::XXH3_MAX;
    use proptest::prelude::*;

    #[test]
    fn the_default_payload_of_any_capacity_is_an_answer_and_the_geometry_check_names_the_real_bound() {
        // Capacities the check refuses still give a default (no overflow before the check).
        for capacity in [0, 1, 64, 127, 128, 1 << 16] {
            let _ = default_max_record_payload(capacity);
        }
        assert_eq!(default_max_record_payload(0), 0);
        assert_eq!(default_max_record_payload(1 << 16), (1 << 14) - HEADER_LEN);
        let refused = check_geometry(0, default_max_record_payload(0)).unwrap_err().to_string();
        assert!(refused.contains("power of two of at least 65536"), "{refused}");
        // A huge ring: the default payload is the largest a u32 length holds, and an option
        // past it is refused naming that bound, not the ring's half.
        let huge = 1usize << 40;
        assert_eq!(default_max_record_payload(huge), u32::MAX as usize);
        assert!(check_geometry(huge, default_max_record_payload(huge)).is_ok());
        let refused = check_geometry(huge, (huge / 4) - HEADER_LEN).unwrap_err().to_string();
        assert!(refused.contains(&format!("..={}", u32::MAX)), "{refused}");
    }

    proptest! {
        /// A record checksum is the ring's function over the header with `crc = 0` followed by
        /// the payload, whether the payload is added at once or in pieces: what the `crc32c`
        /// and `xxhash-rust` crates compute, so rings written by other implementations read
        /// the same.
        #[test]
        fn record_checksum_is_of_header_then_payload(
            position in any::<u64>(), seq in any::<u64>(), flags in any::<u16>(),
            payload in prop::collection::vec(any::<u8>(), 0..5000), cut in 0usize..5000,
        ) {
            let len = payload.len() as u32;
            let h = RecordHeader { position, seq, len, flags, reserved: 0, total_len: len, crc: 0xffff_ffff };
            let mut covered = RecordHeader { crc: 0, ..h }.encode().to_vec();
            covered.extend_from_slice(&payload);
            for (checksum, expected) in [
                (Checksum::Crc32c, crc32c::crc32c(&covered)),
                (Checksum::XxHash64, xxhash_rust::xxh64::xxh64(&covered, 0) as u32),
                (Checksum::Xxh3Crc32c, if covered.len() <= XXH3_MAX {
                    xxhash_rust::xxh3::xxh3_64(&covered) as u32
                } else {
                    crc32c::crc32c(&covered)
                }),
            ] {
                prop_assert_eq!(h.compute_crc(checksum, &payload), expected);
                let cut = cut.min(payload.len());
                let mut pieces = h.crc_start(checksum);
                pieces.update(&payload[..cut]);
                pieces.update(&payload[cut..]);
                prop_assert_eq!(pieces.finish(), expected);
            }
        }
    }

    /// A header with every field distinct: a whole message of 7 bytes at a high position.
    fn sample_header() -> RecordHeader {
        RecordHeader {
            position: 0x0102_0304_0506_0708,
            seq: 42,
            len: 7,
            flags: FLAG_FIRST | FLAG_LAST,
            reserved: 0,
            total_len: 7,
            crc: 0xdead_beef,
        }
    }

    #[test]
    fn header_roundtrip_and_crc_covers_everything() {
        let h = sample_header();
        assert_eq!(RecordHeader::decode(&h.encode()), Some(h));
        let h = RecordHeader { reserved: 0x0a0b, crc: 0xfedc_ba98, total_len: 0x1234_5678, ..h };
        let words: Vec<u8> = h.words().iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(words, h.encode(), "the words are the encoding's");
        assert_eq!(RecordHeader::decode(&words), Some(h), "every field at its place");
        assert_eq!(RecordHeader::len_and_flags(h.words()[LEN_WORD / 8]), (h.len, h.flags));
        assert_eq!(RecordHeader::decode(&[0; 31]), None);
        for checksum in Checksum::ALL {
            let c = h.compute_crc(checksum, b"payload");
            assert_eq!(c, RecordHeader { crc: 0, ..h }.compute_crc(checksum, b"payload"));
            assert_ne!(c, RecordHeader { seq: 43, ..h }.compute_crc(checksum, b"payload"));
            assert_ne!(c, h.compute_crc(checksum, b"paylaod"));
        }
    }

    #[test]
    fn the_record_header_and_control_block_keep_their_golden_layout() {
        assert_eq!(LAYOUT_VERSION, 1, "the layout version changed: renew the golden bytes below");
        let h = RecordHeader { total_len: 9, ..sample_header() };
        let golden: [u8; HEADER_LEN] = [
            8, 7, 6, 5, 4, 3, 2, 1, // position
            42, 0, 0, 0, 0, 0, 0, 0, // seq
            7, 0, 0, 0, // len
            3, 0, // flags
            0, 0, // reserved
            9, 0, 0, 0, // total_len
            0xef, 0xbe, 0xad, 0xde, // crc
        ];
        assert_eq!(h.encode(), golden, "the record header layout changed without a new LAYOUT_VERSION");
        assert_eq!(&MAGIC.to_le_bytes(), b"RDMAPSR1");
        let offsets = [
            ctrl::MAGIC,
            ctrl::VERSION,
            ctrl::CAPACITY,
            ctrl::EPOCH,
            ctrl::TAIL,
            ctrl::TAIL_SEQ,
            ctrl::HEAD,
            ctrl::HEAD_SEQ,
            ctrl::MAX_RECORD_PAYLOAD,
            ctrl::FLOOR,
        ];
        assert_eq!(offsets, [0, 8, 16, 24, 32, 40, 48, 56, 64, 72], "control block offsets");
        assert_eq!(CONTROL_READ_LEN, 80);
    }

    #[test]
    fn geometry() {
        assert_eq!(record_size(0), 32);
        assert_eq!(record_size(1), 64);
        assert_eq!(record_size(32), 64);
        assert_eq!(record_size(33), 96);
        assert_eq!(data_offset(65536 + 96, 65536), CONTROL_SIZE + 96);
        assert_eq!(room_to_end(65536 + 96, 65536), 65536 - 96);
        check_geometry(1 << 20, default_max_record_payload(1 << 20)).unwrap();
        assert!(check_geometry(1 << 20 | 1, 1024).is_err());
        assert!(check_geometry(32 * 1024, 1024).is_err());
        assert!(check_geometry(1 << 16, (1 << 15) - 31).is_err());
        check_geometry(1 << 16, (1 << 15) - 32).unwrap();
    }

    #[test]
    fn control_snapshot_rejects_garbage() {
        assert!(ControlSnapshot::decode(&[0; 79]).is_err());
        assert!(matches!(ControlSnapshot::decode(&[0; 80]), Err(RingError::BadControl(_))));
        let mut b = [0u8; 80];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&2u64.to_le_bytes());
        assert!(ControlSnapshot::decode(&b).is_err());
        b[8..16].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        b[48..56].copy_from_slice(&77u64.to_le_bytes());
        assert_eq!(ControlSnapshot::decode(&b).unwrap().head, 77);
    }
}
