//! The messages of a same-host stream, fixed-size and little-endian: the opening hello, then
//! requests with their answers: for a region (the answer carries the region's descriptor) or
//! for the peer's inbox (the answer carries the inbox, the sender's credit page and its place
//! at the bell: the owner page, the hint page and the sender's own eventfd).

use crate::types::Access;

/// First bytes of a hello ("RPSH").
const HELLO_MAGIC: u32 = 0x4853_5052;
/// Version of these messages (2: an inbox answer carries the bell's eventfd; 3: it carries
/// the sender's own read-only credit page instead of a receive pool shared by all senders;
/// 4: it carries the bell's read-only owner page, its hint page and an eventfd of the sender's
/// own instead of one page and one eventfd shared read-write by all senders).
const VERSION: u32 = 4;
/// Size of a hello and of a request.
pub(crate) const MSG_LEN: usize = 16;
/// Size of an answer.
pub(crate) const ANSWER_LEN: usize = 56;
/// Request for a region by its rkey.
const OP_REGION: u32 = 1;
/// Request for the inbox of the connection (with its receive pool and bell).
const OP_INBOX: u32 = 2;
/// Request flag: attach the key table too.
pub(crate) const WANT_KEYS: u32 = 1;

/// Encodes the hello that opens a stream: the nonce the stream's owner was given for one
/// connection.
pub(crate) fn hello(nonce: u64) -> [u8; MSG_LEN] {
    let mut b = [0u8; MSG_LEN];
    b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&nonce.to_le_bytes());
    b
}

/// The nonce of a hello, if `b` is one.
pub(crate) fn parse_hello(b: &[u8; MSG_LEN]) -> Option<u64> {
    let magic = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
    let version = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
    let nonce = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    (magic == HELLO_MAGIC && version == VERSION && nonce != 0).then_some(nonce)
}

/// A request of a same-host stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// The region of `rkey`; `flags` is [`WANT_KEYS`] or 0.
    Region {
        /// The region's key.
        rkey: u32,
        /// [`WANT_KEYS`] or 0.
        flags: u32,
    },
    /// The inbox the responder keeps for this connection's SENDs; `flags` is [`WANT_KEYS`] or 0.
    Inbox {
        /// [`WANT_KEYS`] or 0.
        flags: u32,
    },
}

impl Request {
    /// The wire bytes.
    pub(crate) fn encode(&self) -> [u8; MSG_LEN] {
        let (op, rkey, flags) = match *self {
            Request::Region { rkey, flags } => (OP_REGION, rkey, flags),
            Request::Inbox { flags } => (OP_INBOX, 0, flags),
        };
        let mut b = [0u8; MSG_LEN];
        b[0..4].copy_from_slice(&op.to_le_bytes());
        b[4..8].copy_from_slice(&rkey.to_le_bytes());
        b[8..12].copy_from_slice(&flags.to_le_bytes());
        b
    }

    /// Decodes a request; `None` for anything else.
    pub(crate) fn decode(b: &[u8; MSG_LEN]) -> Option<Request> {
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if word(12) != 0 {
            return None;
        }
        match word(0) {
            OP_REGION if word(8) & !WANT_KEYS == 0 => Some(Request::Region { rkey: word(4), flags: word(8) }),
            OP_INBOX if word(4) == 0 && word(8) & !WANT_KEYS == 0 => Some(Request::Inbox { flags: word(8) }),
            _ => None,
        }
    }
}

/// The answer to a request; a refused one has `granted == false` and no descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Answer {
    /// The region exists, belongs to the connection's protection domain and grants remote access.
    pub(crate) granted: bool,
    /// The region's access flags.
    pub(crate) access: u32,
    /// Its slot in the key table.
    pub(crate) slot: u32,
    /// The word its slot holds while it is registered.
    pub(crate) word: u64,
    /// The owner's address of its first byte.
    pub(crate) base: u64,
    /// Its registered length.
    pub(crate) len: u64,
    /// The key-table slot of the connection's queue pair (live while it answers requests).
    pub(crate) conn_slot: u32,
    /// The word that slot holds while the queue pair lives.
    pub(crate) conn_word: u64,
}

impl Answer {
    /// The wire bytes.
    pub(crate) fn encode(&self) -> [u8; ANSWER_LEN] {
        let mut b = [0u8; ANSWER_LEN];
        b[0..4].copy_from_slice(&u32::from(!self.granted).to_le_bytes());
        b[4..8].copy_from_slice(&self.access.to_le_bytes());
        b[8..12].copy_from_slice(&self.slot.to_le_bytes());
        b[16..24].copy_from_slice(&self.word.to_le_bytes());
        b[24..32].copy_from_slice(&self.base.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b[40..44].copy_from_slice(&self.conn_slot.to_le_bytes());
        b[48..56].copy_from_slice(&self.conn_word.to_le_bytes());
        b
    }

    /// Decodes an answer; `None` when malformed.
    pub(crate) fn decode(b: &[u8; ANSWER_LEN]) -> Option<Answer> {
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let long = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let status = word(0);
        if status > 1 || word(12) != 0 || word(44) != 0 {
            return None;
        }
        Some(Answer {
            granted: status == 0,
            access: word(4),
            slot: word(8),
            word: long(16),
            base: long(24),
            len: long(32),
            conn_slot: word(40),
            conn_word: long(48),
        })
    }

    /// The access flags as a set.
    pub(crate) fn access(&self) -> Access {
        Access::from_bits_truncate(self.access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        assert_eq!(parse_hello(&hello(7)), Some(7));
        assert_eq!(parse_hello(&hello(0)), None);
        assert_eq!(parse_hello(&[0xFF; MSG_LEN]), None);
        let r = Request::Region { rkey: 0xABCD, flags: WANT_KEYS };
        assert_eq!(Request::decode(&r.encode()), Some(r));
        let inbox = Request::Inbox { flags: WANT_KEYS };
        assert_eq!(Request::decode(&inbox.encode()), Some(inbox));
        let mut odd = inbox.encode();
        odd[4] = 1;
        assert_eq!(Request::decode(&odd), None, "an inbox request names no region");
        assert_eq!(Request::decode(&[0xFF; MSG_LEN]), None);
        let a = Answer {
            granted: true,
            access: 4,
            slot: 3,
            word: 1 << 32 | 9,
            base: 0x7f00_0000_0000,
            len: 4096,
            conn_slot: 5,
            conn_word: 2 << 32 | 7,
        };
        assert_eq!(Answer::decode(&a.encode()), Some(a));
        assert_eq!(Answer::decode(&[0xFF; ANSWER_LEN]), None);
    }
}
