//! The hello that opens the stream of a queue pair connected by hand: the payload of a `Hello`
//! frame, sent first each way (the dialer's, then the answer of the end it reached). It names
//! the sender and the queue pair it is for by queue pair number and first PSN, as the two
//! endpoints exchanged over the application's side channel say; a hello from a peer is
//! checked field by field before anything uses it, and an end binds a stream only to a hello
//! that is exactly the one its peer's endpoint predicts ([`Hello::between`]).

use super::wire::HELLO_LEN;
use crate::bootstrap::QpEndpoint;

use crate::bootstrap::MAX_24_BIT_FIELD;

/// A hello. Layout (little-endian, [`HELLO_LEN`] bytes): `qp_num u32 | psn u32 | lid u16 |
/// port u8 | reserved u8 | target_qp_num u32 | target_psn u32 | reserved u32`, reserved bytes
/// zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The sender's queue pair number.
    pub(crate) qp_num: u32,
    /// The sender's first PSN.
    pub(crate) psn: u32,
    /// The sender's LID (on soft, its device's data port).
    pub(crate) lid: u16,
    /// The sender's port.
    pub(crate) port: u8,
    /// The queue pair the hello is for.
    pub(crate) target_qp_num: u32,
    /// That queue pair's first PSN.
    pub(crate) target_psn: u32,
}

impl Hello {
    /// The hello the queue pair of endpoint `from` sends to the one of endpoint `to`.
    pub(crate) fn between(from: &QpEndpoint, to: &QpEndpoint) -> Hello {
        Hello {
            qp_num: from.qp_num,
            psn: from.psn,
            lid: from.lid,
            port: from.port,
            target_qp_num: to.qp_num,
            target_psn: to.psn,
        }
    }

    /// The wire bytes.
    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&self.qp_num.to_le_bytes());
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..10].copy_from_slice(&self.lid.to_le_bytes());
        b[10] = self.port;
        b[12..16].copy_from_slice(&self.target_qp_num.to_le_bytes());
        b[16..20].copy_from_slice(&self.target_psn.to_le_bytes());
        b
    }

    /// Decodes a peer's hello: exactly [`HELLO_LEN`] bytes, queue pair numbers and PSNs within
    /// 24 bits, a port from 1, reserved bytes zero; `None` for anything else.
    pub(crate) fn decode(b: &[u8]) -> Option<Hello> {
        let b: &[u8; HELLO_LEN] = b.try_into().ok()?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let h = Hello {
            qp_num: word(0),
            psn: word(4),
            lid: u16::from_le_bytes([b[8], b[9]]),
            port: b[10],
            target_qp_num: word(12),
            target_psn: word(16),
        };
        let in_range = [h.qp_num, h.psn, h.target_qp_num, h.target_psn].iter().all(|&v| v <= MAX_24_BIT_FIELD);
        let reserved_zero = b[11] == 0 && word(20) == 0;
        (in_range && reserved_zero && h.port != 0).then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::PathMtu;

    fn endpoint(qp_num: u32, psn: u32, lid: u16) -> QpEndpoint {
        QpEndpoint { qp_num, psn, port: 1, lid, gid: [0; 16], mtu: PathMtu::Mtu4096 }
    }

    #[test]
    fn a_hello_round_trips_and_names_sender_and_target() {
        let (a, b) = (endpoint(0x12_3456, MAX_24_BIT_FIELD, 40_000), endpoint(0x100, 0, 1));
        let h = Hello::between(&a, &b);
        assert_eq!(
            (h.qp_num, h.psn, h.lid, h.port, h.target_qp_num, h.target_psn),
            (0x12_3456, MAX_24_BIT_FIELD, 40_000, 1, 0x100, 0)
        );
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        assert_ne!(Hello::between(&b, &a), h, "the answer is another hello");
    }

    #[test]
    fn a_hello_out_of_bounds_or_of_another_length_is_refused() {
        let good = Hello::between(&endpoint(7, 8, 9), &endpoint(10, 11, 12)).encode();
        assert!(Hello::decode(&good).is_some());
        let over = (MAX_24_BIT_FIELD + 1).to_le_bytes();
        // Each 24-bit field over its bound, the port 0, each reserved byte set.
        let mut bad: Vec<[u8; HELLO_LEN]> = [0, 4, 12, 16]
            .iter()
            .map(|&at| {
                let mut b = good;
                b[at..at + 4].copy_from_slice(&over);
                b
            })
            .collect();
        for (at, value) in [(10, 0), (11, 1), (20, 1), (23, 0x80)] {
            let mut b = good;
            b[at] = value;
            bad.push(b);
        }
        for b in bad {
            assert_eq!(Hello::decode(&b), None, "{b:?}");
        }
        assert_eq!(Hello::decode(&good[..HELLO_LEN - 1]), None, "short");
        assert_eq!(Hello::decode(&[good.as_slice(), &[0]].concat()), None, "long");
        assert_eq!(Hello::decode(&[]), None, "empty");
    }

    #[test]
    fn random_bytes_never_panic_and_what_decodes_re_encodes() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut accepted = 0;
        for i in 0..100_000 {
            let mut b = [0u8; HELLO_LEN];
            for chunk in b.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
            if i % 2 == 0 {
                // Plausible ones too, so that the deeper checks run.
                for at in [3, 7, 11, 15, 19, 20, 21, 22, 23] {
                    b[at] = 0;
                }
            }
            if let Some(h) = Hello::decode(&b) {
                accepted += 1;
                assert_eq!(h.encode(), b);
            }
        }
        assert!(accepted > 0, "the generator never produced a valid hello");
    }
}
