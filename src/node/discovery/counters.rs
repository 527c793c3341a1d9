//! What a node's discovery counts, readable while it runs.

crate::counters::counter_set! {
    /// Counters of a node's discovery.
    pub struct DiscoveryCounters {
        /// Datagrams sent (every part, to the group and to each unicast peer).
        sent: Total, Datagrams;
        /// Announcements of other nodes of this domain handled (those refused at a bound too).
        received: Total, Datagrams;
        /// Peers expired for missed heartbeats.
        expired: Total, Connections;
        /// Datagrams that could not be sent.
        send_errors: Total, Datagrams;
        /// Announcements of another discovery domain, dropped.
        other_domain: Total, Datagrams;
        /// Announcements dropped because they exceed the directory's bounds (1024 peers, 256
        /// datagrams per announcement, 8192 topics per peer, 65 536 topics in all) or name an
        /// invalid topic.
        refused: Total, Datagrams;
        /// With a domain secret: datagrams without a tag, or with one that does not verify
        /// (forged, altered, plain, or sealed with another secret), dropped.
        unauthenticated: Total, Datagrams;
        /// With a domain secret: authentic datagrams seen before (replayed or duplicated), or of
        /// an older epoch of their node than one already heard, dropped.
        replayed: Total, Datagrams;
        /// With a domain secret: authentic datagrams whose sender clock is more than 60 s from
        /// this node's, dropped.
        stale: Total, Datagrams;
        /// Without a domain secret: sealed datagrams (of nodes that have one), which this node
        /// cannot check, dropped.
        sealed_ignored: Total, Datagrams;
        /// Rounds of the discovery thread that found a full batch of datagrams waiting (a flood,
        /// or a burst): datagrams may have been dropped unread, so peers' silence until then did
        /// not count towards their expiry.
        backlogged: Total, Events;
        /// Datagrams dropped because they did not decode (garbage, unknown version, a topic id
        /// not matching its name).
        bad_datagrams: Total, Datagrams;
    }
}
