//! Why things happened, as the API says it: a publisher's policy, why it refused or dropped a
//! subscriber. These are the application's types; the wire has its own (`rdma-wire`'s
//! `protocol` module, whose variant indexes are their encoding), mapped to these in one place
//! here, so the wire can change without breaking applications and the reverse.

use rdma_wire::protocol as wire;

/// Which slow-subscriber policy a publisher runs: the kind of its
/// [`Policy`](crate::Policy), without the policy's settings. Subscribers learn it when they
/// connect ([`PublisherInfo::policy`](crate::PublisherInfo::policy)).
///
/// ```
/// use std::time::Duration;
/// use rdma_pubsub::{Policy, PolicyKind};
///
/// assert_eq!(Policy::Overwrite.kind(), PolicyKind::Overwrite);
/// assert_eq!(Policy::Block { timeout: Duration::from_secs(1) }.kind(), PolicyKind::Block);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// The publisher waits for the slowest subscriber (no loss).
    Block,
    /// The publisher drops a subscriber that is too slow and tells it why.
    DropSlow,
    /// The publisher never waits; slow subscribers lose (and count) the oldest messages.
    Overwrite,
}

/// Why a publisher refused a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectCode {
    /// No publisher of that topic on that node.
    UnknownTopic,
    /// The two nodes speak different protocol versions.
    VersionMismatch,
    /// The subscriber's request did not decode.
    Malformed,
    /// The topic's policy is not one the subscriber accepts.
    PolicyNotAccepted,
    /// The publisher has as many subscribers as it serves.
    TooManySubscribers,
    /// The publisher is closing.
    ShuttingDown,
    /// The topic requires a credential and the subscriber did not prove it: no proof, a wrong
    /// one, a stale time or a replayed nonce (the detail says which).
    Unauthorized,
    /// The publisher's messages are of another type than the subscription's (the detail
    /// names both): decided by the subscription when the publisher's accept announces its
    /// type (see [`MessageType`](crate::MessageType)).
    TypeMismatch,
}

/// Why a publisher dropped a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// The DropSlow policy: the subscriber fell `lag` bytes behind (a whole ring).
    TooSlow {
        /// How far behind the tail its last acknowledgement was, in bytes.
        lag: u64,
    },
    /// The subscriber broke the protocol (a bad acknowledgement, a garbage message).
    ProtocolViolation,
    /// The publisher is closing.
    ShuttingDown,
    /// The subscriber was idle for `millis`: it held the publisher back without acking, or
    /// took none of its control messages (see
    /// [`PublisherBuilder::idle_timeout`](crate::PublisherBuilder::idle_timeout)).
    Idle {
        /// How long it was idle, in milliseconds.
        millis: u64,
    },
}

impl From<wire::PolicyKind> for PolicyKind {
    fn from(kind: wire::PolicyKind) -> PolicyKind {
        match kind {
            wire::PolicyKind::Block => PolicyKind::Block,
            wire::PolicyKind::DropSlow => PolicyKind::DropSlow,
            wire::PolicyKind::Overwrite => PolicyKind::Overwrite,
        }
    }
}

impl From<PolicyKind> for wire::PolicyKind {
    fn from(kind: PolicyKind) -> wire::PolicyKind {
        match kind {
            PolicyKind::Block => wire::PolicyKind::Block,
            PolicyKind::DropSlow => wire::PolicyKind::DropSlow,
            PolicyKind::Overwrite => wire::PolicyKind::Overwrite,
        }
    }
}

impl From<wire::RejectCode> for RejectCode {
    fn from(code: wire::RejectCode) -> RejectCode {
        match code {
            wire::RejectCode::UnknownTopic => RejectCode::UnknownTopic,
            wire::RejectCode::VersionMismatch => RejectCode::VersionMismatch,
            wire::RejectCode::Malformed => RejectCode::Malformed,
            wire::RejectCode::PolicyNotAccepted => RejectCode::PolicyNotAccepted,
            wire::RejectCode::TooManySubscribers => RejectCode::TooManySubscribers,
            wire::RejectCode::ShuttingDown => RejectCode::ShuttingDown,
            wire::RejectCode::Unauthorized => RejectCode::Unauthorized,
        }
    }
}

impl From<wire::DropReason> for DropReason {
    fn from(reason: wire::DropReason) -> DropReason {
        match reason {
            wire::DropReason::TooSlow { lag } => DropReason::TooSlow { lag },
            wire::DropReason::ProtocolViolation => DropReason::ProtocolViolation,
            wire::DropReason::ShuttingDown => DropReason::ShuttingDown,
            wire::DropReason::Idle { millis } => DropReason::Idle { millis },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_value_maps_to_its_api_value_and_policies_round_trip() {
        for (wire_kind, kind) in [
            (wire::PolicyKind::Block, PolicyKind::Block),
            (wire::PolicyKind::DropSlow, PolicyKind::DropSlow),
            (wire::PolicyKind::Overwrite, PolicyKind::Overwrite),
        ] {
            assert_eq!(PolicyKind::from(wire_kind), kind);
            assert_eq!(wire::PolicyKind::from(kind), wire_kind);
        }
        assert_eq!(RejectCode::from(wire::RejectCode::Unauthorized), RejectCode::Unauthorized);
        assert_eq!(RejectCode::from(wire::RejectCode::UnknownTopic), RejectCode::UnknownTopic);
        assert_eq!(DropReason::from(wire::DropReason::TooSlow { lag: 9 }), DropReason::TooSlow { lag: 9 });
        assert_eq!(DropReason::from(wire::DropReason::Idle { millis: 3 }), DropReason::Idle { millis: 3 });
    }
}
