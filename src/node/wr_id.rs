//! The one layout of the work-request ids the node posts. An id says who owns the request (a
//! subscription's feed, by its slab key and generation; a publisher's are owner 0), what the
//! request does, and its slot in the owner's control buffer; the completion carries it back
//! and the owner decodes it to find what completed.
//!
//! | bits | field |
//! |---|---|
//! | 40–63 | owner: a feed's slab key (24 bits) |
//! | 24–39 | the owner's generation (low 16 bits): a completion of a feed's earlier occupant of the key is told apart |
//! | 16–23 | kind ([`WrKind`]) |
//! | 0–15 | slot |

/// What a work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrKind {
    /// A subscription's RDMA READ of a publisher's ring.
    Read = 1,
    /// A subscription's ack SEND.
    Ack = 2,
    /// A subscription's doorbell-request SEND.
    DoorbellRequest = 3,
    /// A receive (control messages, either side).
    Recv = 4,
    /// A publisher's control SEND.
    Send = 5,
}

impl WrKind {
    fn from_bits(bits: u64) -> Option<WrKind> {
        Some(match bits {
            1 => WrKind::Read,
            2 => WrKind::Ack,
            3 => WrKind::DoorbellRequest,
            4 => WrKind::Recv,
            5 => WrKind::Send,
            _ => return None,
        })
    }
}

/// A work-request id, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrId {
    /// The owner: a feed's slab key (0 for a publisher).
    pub(crate) owner: usize,
    /// The owner's generation, low 16 bits.
    pub(crate) generation: u32,
    /// What the request does.
    pub(crate) kind: WrKind,
    /// Its slot in the owner's control buffer.
    pub(crate) slot: usize,
}

const OWNER_SHIFT: u32 = 40;
const GENERATION_SHIFT: u32 = 24;
const KIND_SHIFT: u32 = 16;
const GENERATION_MASK: u64 = 0xffff;
const SLOT_MASK: u64 = 0xffff;
/// Largest slot an id holds.
pub(crate) const MAX_SLOT: usize = SLOT_MASK as usize;

impl WrId {
    /// An id of a publisher's request (owner 0, generation 0).
    pub(crate) fn publisher(kind: WrKind, slot: u32) -> WrId {
        WrId { owner: 0, generation: 0, kind, slot: slot as usize }
    }

    /// An id of feed `key`'s request, in its generation `generation`.
    pub(crate) fn feed(key: usize, generation: u32, kind: WrKind, slot: usize) -> WrId {
        WrId { owner: key, generation: generation & GENERATION_MASK as u32, kind, slot }
    }

    /// The 64-bit id to post.
    pub(crate) fn encode(self) -> u64 {
        debug_assert!(self.slot <= MAX_SLOT && (self.owner as u64) < 1 << (64 - OWNER_SHIFT));
        ((self.owner as u64) << OWNER_SHIFT)
            | ((u64::from(self.generation) & GENERATION_MASK) << GENERATION_SHIFT)
            | ((self.kind as u64) << KIND_SHIFT)
            | (self.slot as u64 & SLOT_MASK)
    }

    /// Decodes an id made by [`encode`](Self::encode); `None` when its kind is unknown.
    pub(crate) fn decode(id: u64) -> Option<WrId> {
        Some(WrId {
            owner: (id >> OWNER_SHIFT) as usize,
            generation: ((id >> GENERATION_SHIFT) & GENERATION_MASK) as u32,
            kind: WrKind::from_bits((id >> KIND_SHIFT) & 0xff)?,
            slot: (id & SLOT_MASK) as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_decodes_to_what_it_was_made_of() {
        let kinds = [WrKind::Read, WrKind::Ack, WrKind::DoorbellRequest, WrKind::Recv, WrKind::Send];
        for kind in kinds {
            for (key, generation, slot) in [(0, 0, 0), (1, 7, 3), ((1 << 24) - 1, 0xffff, MAX_SLOT)] {
                let id = WrId::feed(key, generation, kind, slot);
                assert_eq!(WrId::decode(id.encode()), Some(id));
            }
        }
        assert_eq!(WrId::decode(WrId::publisher(WrKind::Send, 16_383).encode()).map(|id| id.slot), Some(16_383));
        // Only the generation's low 16 bits are kept.
        assert_eq!(WrId::feed(2, 0x1_0005, WrKind::Read, 0).generation, 5);
        assert_eq!(WrId::decode(0), None, "kind 0 is no request of the node's");
    }
}
