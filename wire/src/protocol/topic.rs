//! Topic identifiers: a stable 64-bit FNV-1a hash of the topic name.

use serde::{Deserialize, Serialize};

/// The identifier of a topic on the wire: FNV-1a 64 of its UTF-8 name (stable across builds,
/// machines and versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TopicId(pub u64);

impl TopicId {
    /// The identifier of topic `name`.
    pub fn of(name: &str) -> TopicId {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        TopicId(name.bytes().fold(OFFSET, |h, b| (h ^ b as u64).wrapping_mul(PRIME)))
    }
}

impl std::fmt::Display for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(TopicId::of(""), TopicId(0xcbf2_9ce4_8422_2325));
        assert_eq!(TopicId::of("a"), TopicId(0xaf63_dc4c_8601_ec8c));
        assert_eq!(TopicId::of("foobar"), TopicId(0x8594_4171_f739_67e8));
        assert_ne!(TopicId::of("prices"), TopicId::of("prices2"));
        assert_eq!(TopicId(0xab).to_string(), "00000000000000ab");
    }
}
