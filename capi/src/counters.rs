//! The counters of publishers and subscriptions as plain C structs of `uint64_t`, read with
//! `rps_publisher_get_counters` and `rps_subscription_get_counters`. Fields keep the library's
//! names; each is documented in the Rust API (`PublisherCounters`, `SubscriptionCounters`).

use pubsub::{PublisherCounters, SubscriptionCounters};

/// The counters of a publisher, read at one moment (`PublisherCounters`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct rps_publisher_counters {
    /// Messages published.
    pub published: u64,
    /// Payload bytes published.
    pub bytes: u64,
    /// Acks received.
    pub acks: u64,
    /// Acks refused (position not yet published, or unknown sender).
    pub bad_acks: u64,
    /// Doorbells sent.
    pub doorbells: u64,
    /// Subscribers accepted.
    pub accepted: u64,
    /// Subscribers dropped: by the DropSlow policy, or idle.
    pub dropped: u64,
    /// Subscribers rejected because they did not prove the topic's credential.
    pub rejected_unauthorized: u64,
    /// Times `publish` waited for credit.
    pub waits: u64,
    /// Of those, the waits woken only by the solicited ack of the subscriber asked for credit.
    pub solicited_waits: u64,
    /// `CreditWanted` requests sent by a blocked publisher.
    pub credit_requests: u64,
    /// Subscribers connected now (a gauge).
    pub subscribers: u64,
    /// Ring position after the last message published (a gauge, bytes).
    pub position: u64,
    /// Position acknowledged by the slowest connected subscriber (a gauge, bytes).
    pub slowest_ack: u64,
    /// Message records written without a checksum (while every subscriber read the ring in
    /// place).
    pub unchecked_records: u64,
    /// Of the doorbells, those that carried the new records.
    pub doorbells_with_records: u64,
    /// Connection events the CM thread left to the holder of the publisher's state.
    pub deferred_events: u64,
}

impl rps_publisher_counters {
    /// Reads `counters` now.
    pub(crate) fn read(counters: &PublisherCounters) -> rps_publisher_counters {
        rps_publisher_counters {
            published: counters.published(),
            bytes: counters.bytes(),
            acks: counters.acks(),
            bad_acks: counters.bad_acks(),
            doorbells: counters.doorbells(),
            accepted: counters.accepted(),
            dropped: counters.dropped(),
            rejected_unauthorized: counters.rejected_unauthorized(),
            waits: counters.waits(),
            solicited_waits: counters.solicited_waits(),
            credit_requests: counters.credit_requests(),
            subscribers: counters.subscribers(),
            position: counters.position(),
            slowest_ack: counters.slowest_ack(),
            unchecked_records: counters.unchecked_records(),
            doorbells_with_records: counters.doorbells_with_records(),
            deferred_events: counters.deferred_events(),
        }
    }
}

/// The counters of a subscription, read at one moment (`SubscriptionCounters`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct rps_subscription_counters {
    /// Messages delivered.
    pub delivered: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// READs issued.
    pub reads: u64,
    /// READs that brought nothing new.
    pub empty_reads: u64,
    /// READs posted ahead: before the READ that showed more written data was validated.
    pub reads_ahead: u64,
    /// Records re-read because a READ raced a write.
    pub torn: u64,
    /// Messages lost to overruns.
    pub lost: u64,
    /// Acks sent.
    pub acks: u64,
    /// Doorbells requested.
    pub doorbell_requests: u64,
    /// Doorbells received.
    pub doorbells: u64,
    /// Connections established to a publisher this subscription had been connected to before.
    pub reconnects: u64,
    /// Messages skipped because they had been delivered already (reconnection to the same epoch).
    pub duplicates: u64,
    /// Waits that blocked at once instead of polling first (no spin permit was free).
    pub unpolled_waits: u64,
    /// `CreditWanted` requests received from publishers waiting for credit.
    pub credit_requests: u64,
    /// Acks sent as solicited SENDs, answering those requests.
    pub solicited_acks: u64,
    /// Connections to publishers whose ring this subscription reads through shared memory.
    pub shared_memory_connects: u64,
    /// Connections to publishers whose ring this subscription reads over the network.
    pub network_connects: u64,
    /// Bytes of READ buffers the subscription holds now (a gauge).
    pub read_buffer_bytes: u64,
    /// Events dropped, oldest first, because the application left too many untaken.
    pub events_dropped: u64,
    /// Accepts refused because they did not authenticate (domain secret, credential, the
    /// announced publisher).
    pub unauthenticated_accepts: u64,
    /// Of the shared-memory connections, those whose ring the subscription reads in place.
    pub in_place_connects: u64,
    /// Publishers not connected because the subscription read `max_feeds` already.
    pub feed_limit_reached: u64,
    /// Topics the subscription reads now (a gauge).
    pub matched_topics: u64,
    /// Topic listings of nodes a pattern subscription was connected to that failed
    /// (`RPS_EVENT_LISTING_FAILED`).
    pub listing_failures: u64,
    /// Of the doorbells, those whose records were taken as a READ's (no READ for them).
    pub doorbell_records: u64,
    /// Bytes the READs asked for (reads of a ring read in place are not counted).
    pub read_bytes: u64,
    /// READs posted behind another READ still on the wire (records larger than the batch,
    /// the subscriber behind).
    pub reads_behind: u64,
}

impl rps_subscription_counters {
    /// Reads `counters` now.
    pub(crate) fn read(counters: &SubscriptionCounters) -> rps_subscription_counters {
        rps_subscription_counters {
            delivered: counters.delivered(),
            bytes: counters.bytes(),
            reads: counters.reads(),
            empty_reads: counters.empty_reads(),
            reads_ahead: counters.reads_ahead(),
            torn: counters.torn(),
            lost: counters.lost(),
            acks: counters.acks(),
            doorbell_requests: counters.doorbell_requests(),
            doorbells: counters.doorbells(),
            reconnects: counters.reconnects(),
            duplicates: counters.duplicates(),
            unpolled_waits: counters.unpolled_waits(),
            credit_requests: counters.credit_requests(),
            solicited_acks: counters.solicited_acks(),
            shared_memory_connects: counters.shared_memory_connects(),
            network_connects: counters.network_connects(),
            read_buffer_bytes: counters.read_buffer_bytes(),
            events_dropped: counters.events_dropped(),
            unauthenticated_accepts: counters.unauthenticated_accepts(),
            in_place_connects: counters.in_place_connects(),
            feed_limit_reached: counters.feed_limit_reached(),
            matched_topics: counters.matched_topics(),
            listing_failures: counters.listing_failures(),
            doorbell_records: counters.doorbell_records(),
            read_bytes: counters.read_bytes(),
            reads_behind: counters.reads_behind(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub::counters::CounterSet;

    /// Every counter of the library reaches C: a struct has one field per counter, with the
    /// counter's value.
    #[test]
    fn the_c_structs_carry_every_counter() {
        let publisher = PublisherCounters::default();
        assert_eq!(std::mem::size_of::<rps_publisher_counters>(), 8 * publisher.values().len());
        let subscription = SubscriptionCounters::default();
        assert_eq!(std::mem::size_of::<rps_subscription_counters>(), 8 * subscription.values().len());
    }
}
