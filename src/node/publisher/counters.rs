//! What a publisher counts, readable while it runs.

crate::counters::counter_set! {
    /// Counters of a publisher, readable while it runs.
    pub struct PublisherCounters {
        /// Messages published.
        published: Total, Messages;
        /// Payload bytes published.
        bytes: Total, Bytes;
        /// Acks received.
        acks: Total, Events;
        /// Acks refused (position not yet published, or unknown sender).
        bad_acks: Total, Events;
        /// Doorbells sent.
        doorbells: Total, Events;
        /// Subscribers accepted.
        accepted: Total, Connections;
        /// Subscribers dropped: by the DropSlow policy, or idle (see
        /// [`PublisherBuilder::idle_timeout`](super::PublisherBuilder::idle_timeout)).
        dropped: Total, Connections;
        /// Subscribers rejected because they did not prove the topic's credential (no proof, a
        /// wrong one, a stale time or a replayed nonce).
        rejected_unauthorized: Total, Connections;
        /// Times `publish` waited for credit.
        waits: Total, Events;
        /// Of those, the waits woken only by the solicited ack of the subscriber asked for credit
        /// (several subscribers held the publisher back), not by every ack.
        solicited_waits: Total, Events;
        /// `CreditWanted` requests sent: a blocked publisher asking the subscriber that will
        /// probably ack last for a solicited ack.
        credit_requests: Total, Events;
        /// Subscribers connected now (a gauge).
        subscribers: Gauge, Connections;
        /// Message records written without a checksum (while every subscriber read the ring in
        /// place: see `PublisherShared` on checksums).
        unchecked_records: Total, Messages;
        /// Ring position after the last message published (a gauge, bytes).
        position: Gauge, Position;
        /// Position acknowledged by the slowest connected subscriber (a gauge, bytes): the lag is
        /// `position - slowest_ack`.
        slowest_ack: Gauge, Position;
        /// Of the doorbells, those that carried the new records (to a subscriber that READs the
        /// ring and asked for them at connect): it takes them without a READ.
        doorbells_with_records: Total, Events;
        /// Connection events (connects, disconnects) the CM thread left to the holder of the
        /// publisher's state, an [`ExclusivePublisher`](super::ExclusivePublisher) between two
        /// messages, because it held the state longer than the CM thread waits.
        deferred_events: Total, Events;
    }
}
