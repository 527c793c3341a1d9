//! What a subscription counts, readable while it runs.

use crate::node::single_writer::add_single_writer;

crate::counters::counter_set! {
    /// Counters of a subscription.
    pub struct SubscriptionCounters {
        /// Messages delivered.
        delivered: Total, Messages;
        /// Payload bytes delivered.
        bytes: Total, Bytes;
        /// READs issued (and reads of a ring read in place).
        reads: Total, Events;
        /// READs (or reads in place) that brought nothing new.
        empty_reads: Total, Events;
        /// READs posted ahead: before the READ that showed more written data was validated.
        reads_ahead: Total, Events;
        /// READs posted behind another READ still on the wire (a stream of records larger
        /// than the batch, the subscriber behind): the publisher's NIC serves them back to
        /// back.
        reads_behind: Total, Events;
        /// Records re-read because a READ raced a write.
        torn: Total, Events;
        /// Messages lost to overruns.
        lost: Total, Messages;
        /// Acks sent.
        acks: Total, Events;
        /// Doorbells requested.
        doorbell_requests: Total, Events;
        /// Doorbells received.
        doorbells: Total, Events;
        /// Connections established to a publisher this subscription had been connected to before.
        reconnects: Total, Connections;
        /// Messages skipped because they had been delivered already (reconnection to the same epoch).
        duplicates: Total, Messages;
        /// Waits that blocked at once instead of polling first, because as many subscriptions of
        /// the process as it has CPUs but one were polling already.
        unpolled_waits: Total, Events;
        /// `CreditWanted` requests received from publishers waiting for credit.
        credit_requests: Total, Events;
        /// Acks sent as solicited SENDs, answering those requests.
        solicited_acks: Total, Events;
        /// Accepts refused because they did not authenticate: no valid tag under the domain
        /// secret or the credential answering the challenge, or another publisher than
        /// discovery announced.
        unauthenticated_accepts: Total, Events;
        /// Connections to publishers whose ring this subscription reads through shared memory
        /// (same host, soft fabric).
        shared_memory_connects: Total, Connections;
        /// Of those, connections whose ring the subscription reads in place, from its read-only
        /// mapping (no READ work request, no completion per batch, no checksum).
        in_place_connects: Total, Connections;
        /// Connections to publishers whose ring this subscription reads over the network.
        network_connects: Total, Connections;
        /// Bytes of READ buffers the subscription holds now (a gauge). A feed's two buffers start
        /// at the batch size and grow to the largest READ its records need, never past what the
        /// ring's largest record needs.
        read_buffer_bytes: Gauge, Bytes;
        /// Events dropped, oldest first, because the application left more than
        /// [`MAX_EVENTS`](super::MAX_EVENTS) untaken (and errors about undeliverable messages
        /// beyond the 16 held for `recv`, whose events still name them).
        events_dropped: Total, Events;
        /// Publishers discovery announced that the subscription did not connect to, because it
        /// read [`max_feeds`](crate::SubscriberBuilder::max_feeds) publishers already (each
        /// counted once, with its [`FeedLimit`](crate::SubscriptionEvent::FeedLimit) event).
        feed_limit_reached: Total, Connections;
        /// Topics discovery announces publishers of that the subscription reads now (a gauge:
        /// 1 or 0 for a topic, the topics matched for a pattern; without discovery, the topics
        /// the listings of the nodes it connected to list that the pattern includes).
        matched_topics: Gauge, Connections;
        /// Topic listings of nodes a pattern subscription was connected to that failed: refused,
        /// unauthenticated, invalid or broken (each with a
        /// [`ListingFailed`](crate::SubscriptionEvent::ListingFailed) event).
        listing_failures: Total, Events;
        /// Of the doorbells, those whose records (the ring's bytes at the feed's position, sent
        /// with the doorbell) were taken as a READ's: the messages they woke the subscription
        /// for came without a READ.
        doorbell_records: Total, Events;
        /// Bytes the READs asked for (reads of a ring read in place are not counted): against
        /// `bytes`, what pulling costs beyond the payloads (headers, probes of an idle ring).
        read_bytes: Total, Bytes;
    }
}

impl SubscriptionCounters {
    /// Counts a delivered message. Only the subscription's owner (`&mut`) delivers: a load and
    /// a store, not a locked read-modify-write, per message.
    pub(super) fn count_delivery(&self, len: usize) {
        add_single_writer(&self.delivered, 1);
        add_single_writer(&self.bytes, len as u64);
    }

    /// Counts a read of a ring read in place (`empty`: it found nothing new), which a polling
    /// subscription makes every round of its loop; only its owner reads in place.
    pub(super) fn count_read_in_place(&self, empty: bool) {
        add_single_writer(&self.reads, 1);
        if empty {
            add_single_writer(&self.empty_reads, 1);
        }
    }
}
