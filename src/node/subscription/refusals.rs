//! The publishers that refused or dropped a subscription ([`Refusals`]): when no publisher
//! serves it any more, its receive calls return the newest of these reasons, naming the
//! publisher, at once and on every call, rather than wait for messages that cannot come. A
//! publisher that accepts the subscription again leaves the list. A publisher is an address
//! and a topic: a pattern subscription refused for one topic of a node and accepted for
//! another keeps the refusal.

use std::net::SocketAddr;

use rdma_wire::protocol::TopicId;

use crate::error::Error;
use crate::reasons::{DropReason, RejectCode};

/// Why a publisher does not serve the subscription now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// It refused the connection (a wrong credential, no such topic there, another type, ...).
    Rejected { reason: RejectCode, detail: String },
    /// It dropped the subscription (too slow under DropSlow, idle, a protocol violation).
    Dropped { publisher: u64, reason: DropReason },
    /// It sent a message over the subscription's `max_message_len`.
    MessageOverLimit { publisher: u64, len: u64, limit: u64 },
    /// Its records are larger than the subscription READs.
    RecordTooLarge { len: u64, limit: u64 },
    /// Its accept did not prove what the subscription requires (domain secret, credential,
    /// the announced publisher).
    Unauthenticated { detail: String },
}

impl Refusal {
    /// The error the receive calls return for it: the refusal of the publisher at `peer`.
    fn error(&self, peer: SocketAddr) -> Error {
        match self.clone() {
            Refusal::Rejected { reason, detail } => Error::Rejected { peer, reason, detail },
            Refusal::Dropped { publisher, reason } => Error::Dropped { peer, publisher, reason },
            Refusal::MessageOverLimit { publisher, len, limit } => {
                Error::MessageOverLimit { peer, publisher, len, limit }
            }
            Refusal::RecordTooLarge { len, limit } => Error::RecordTooLarge { peer, len, limit },
            Refusal::Unauthenticated { detail } => Error::Unauthenticated { peer, detail },
        }
    }
}

/// The latest refusal of each publisher that refused or dropped the subscription, oldest
/// first. Bounded: at most one entry per publisher (address and topic), and at most
/// [`MAX_REFUSALS`] (the oldest go first).
#[derive(Debug, Default)]
pub(super) struct Refusals {
    items: Vec<((SocketAddr, TopicId), Refusal)>,
}

/// Most refusals a subscription remembers.
const MAX_REFUSALS: usize = 64;

impl Refusals {
    /// The publisher of `topic` at `addr` refused or dropped the subscription (replacing what
    /// it did before).
    pub(super) fn record(&mut self, addr: SocketAddr, topic: TopicId, refusal: Refusal) {
        self.forget(addr, topic);
        if self.items.len() >= MAX_REFUSALS {
            self.items.remove(0);
        }
        self.items.push(((addr, topic), refusal));
    }

    /// The publisher of `topic` at `addr` accepted the subscription.
    pub(super) fn forget(&mut self, addr: SocketAddr, topic: TopicId) {
        self.items.retain(|(publisher, _)| *publisher != (addr, topic));
    }

    /// The newest refusal, as the error of a receive call.
    pub(super) fn newest(&self) -> Option<Error> {
        self.items.last().map(|((addr, _), r)| r.error(*addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn the_newest_refusal_is_the_error_and_an_accept_forgets_its_publisher() {
        let mut refusals = Refusals::default();
        assert!(refusals.newest().is_none());
        let (t, other) = (TopicId::of("t"), TopicId::of("other"));
        let unauthorized = Refusal::Rejected { reason: RejectCode::Unauthorized, detail: "no proof".into() };
        refusals.record(addr(1), t, unauthorized);
        refusals.record(addr(2), t, Refusal::Dropped { publisher: 7, reason: DropReason::TooSlow { lag: 9 } });
        assert!(matches!(
            refusals.newest(),
            Some(Error::Dropped { peer, publisher: 7, reason: DropReason::TooSlow { lag: 9 } }) if peer == addr(2)
        ));
        // Another topic of the same node accepting it keeps the refusal; its own publisher forgets.
        refusals.forget(addr(2), other);
        assert!(matches!(refusals.newest(), Some(Error::Dropped { peer, .. }) if peer == addr(2)));
        refusals.forget(addr(2), t);
        assert!(matches!(
            refusals.newest(),
            Some(Error::Rejected { peer, reason: RejectCode::Unauthorized, .. }) if peer == addr(1)
        ));
        for port in 0..200 {
            refusals.record(addr(port), t, Refusal::RecordTooLarge { len: 2, limit: 1 });
        }
        assert_eq!(refusals.items.len(), MAX_REFUSALS, "bounded");
    }
}
