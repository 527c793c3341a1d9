//! rdma-pubsub: an embedded publish/subscribe middleware over RDMA.
//!
//! A process creates a [`Node`], publishes on topics with a [`Publisher`] and subscribes with a
//! [`Subscription`]. Publishers write messages into a ring in a registered memory region;
//! subscribers pull it with one-sided RDMA READs and acknowledge with SENDs, which are the
//! publisher's flow-control credits. Nodes discover each other's publishers over UD multicast
//! (or unicast to listed peers) and subscriptions connect to them by themselves
//! ([`DiscoveryOptions`]).
//!
//! Topics are [`KeyExpr`]s without wildcards ([`Topic`]). A subscription may take a pattern,
//! a key expression with wildcards (`node.subscriber("sensors/**")`): it reads every publisher,
//! on any node of the domain, whose topic the pattern includes, as discovery finds them (or,
//! without discovery, as the nodes it is connected to list them) and until they leave; each
//! [`Message`] names its topic (a shared handle), order is kept per publisher only, and
//! [`SubscriberBuilder::max_feeds`] bounds its connections.
//!
//! Layers, bottom up, each a crate: [`fabric`] (the crate `rdma-fabric`: a verbs-shaped
//! transport with a soft and a verbs provider) → `rdma-wire` (ring layout, producer, remote
//! reader; private data, control messages, announcements) → this crate (the node, its
//! publishers, subscriptions, discovery and stats) → the API re-exported here.
//!
//! ```no_run
//! use rdma_pubsub::{Node, Start};
//! # fn main() -> rdma_pubsub::Result<()> {
//! let node = Node::builder().build()?;
//! let publisher = node.publisher("prices").create()?;
//! let mut sub = node.subscriber("prices").start(Start::Earliest).create()?;
//! sub.connect_wait(node.local_addr(), std::time::Duration::from_secs(5))?;
//! publisher.publish(b"hello")?;
//! let message = sub.recv()?;
//! assert_eq!(message.data, b"hello");
//! # Ok(()) }
//! ```
//!
//! # Threat model
//!
//! The attacker is on the same network: it can send any datagram to the discovery port, open
//! TCP connections to a node's CM port, complete the connect handshake, and then speak the
//! fabric protocol as it likes (raw frames on soft). It may listen on the discovery group. It
//! does not run as the same user on the same host (such a process can read the node's memory
//! anyway).
//!
//! | mode | trusted | not trusted |
//! |---|---|---|
//! | no secrets (the default) | every host that can reach the discovery port (it may announce any node id, epoch, address and topics) and the CM port (it may subscribe to any topic and READ its ring) | nothing: use it on trusted networks only |
//! | domain secret ([`NodeBuilder::domain_secret`], `RDMA_PUBSUB_DOMAIN_SECRET_FILE`, demo `--secret-file`) | holders of the domain secret, for what they announce (any holder can announce any node id) | everyone else on the discovery port: their datagrams fail the tag and are dropped and counted (`unauthenticated`); captured datagrams of real nodes replayed later are dropped (`replayed`, `stale`); a node without the secret answering a connect (an address taken over) or a genuine accept replayed: the subscriber challenges each connect with a fresh nonce and refuses an accept without a valid tag under the secret ([`Error::Unauthenticated`]) before any READ |
//! | topic credential ([`PublisherBuilder::credential`]) | subscribers that hold the topic's secret | everyone else on the CM port: `Unauthorized` before any accept data (so no rkey) leaves the publisher; a captured connect request replayed is refused (nonce seen, or time out of the 30 s window). Mutual: a publisher that cannot tag its accept under the credential (answering the proof's nonce) is refused by the subscriber ([`Error::Unauthenticated`]) |
//!
//! In every mode, whatever a peer sends is bounded before it is used, no queue grows with what
//! a peer sends, and the soft NIC keeps the limits hardware has.
//!
//! Not protected, in any mode: confidentiality (announcements, accept data with the rkey, and
//! the messages themselves travel unencrypted: soft's TCP, RoCE's UDP); an on-path attacker
//! that modifies or injects into an established connection (the fabric has no integrity of
//! its own beyond RC's sequence numbers); a captured connect request used once before the
//! genuine one arrives; floods of the link itself. Clocks of hosts must agree within 60 s
//! (discovery) and 30 s (credentials).
//!
//! ## Each bound and the test that shows it
//!
//! Tests are named as `cargo test` lists them: an integration test by its file under `tests/`
//! (`hostile::nic::...` is `tests/hostile/nic.rs`), a unit test by its module path in its
//! crate, a conformance case by its name in `fabric/tests/fabric_conformance/`.
//!
//! | attack | bound | test |
//! |---|---|---|
//! | a forged Hello reusing a real publisher's node id with a newer epoch | with a domain secret: dropped, counted; the real publisher stays and keeps delivering | `hostile::discovery::a_forged_hello_with_a_real_publishers_id_and_a_newer_epoch_is_dropped_and_counted` |
//! | replayed Hello, Heartbeat or Goodbye of a real node | 64-entry replay window per node and epoch (kept until the peer's datagrams are stale), 60 s clock window | `hostile::discovery::replayed_heartbeats_hellos_and_goodbyes_of_a_real_node_are_dropped_and_counted` |
//! | a flood of node ids, parts and topics | `MAX_PEERS` 1,024, `MAX_PARTS` 256, `MAX_PEER_TOPICS` 8,192, `MAX_TOTAL_TOPICS` 65,536; refused and counted; RSS asserted in a child process | `hostile::discovery::a_discovery_flood_of_ids_parts_and_topics_stays_within_bounded_memory`; one by one: `node::discovery::directory::tests::floods_of_peers_parts_and_topics_are_refused_and_counted` |
//! | a datagram flood that would hide real heartbeats | datagrams read in batches of 64; a round that finds a full batch waiting does not count the time since the socket was last drained (`backlogged`) | `hostile::discovery::an_unauthenticated_flood_does_not_expire_a_real_peer` |
//! | unicast to the group port from anywhere | a multicast endpoint binds the group address: unicast never reaches it | `discovery::datagrams::unicast_to_the_group_port_does_not_reach_a_multicast_node` |
//! | an application that never takes its subscription's events (while peers make them) | at most [`MAX_EVENTS`](node::MAX_EVENTS) (1,024) held; the oldest dropped and counted (`events_dropped`) | `node::subscription::events::tests::a_full_queue_drops_and_counts_the_oldest` |
//! | announcements of many topics a subscription's pattern includes (`sensors/**`) | the directory's bounds above hold what is matched; the subscription connects to at most [`SubscriberBuilder::max_feeds`] (1,024) publishers, and tells of each other one once ([`SubscriptionEvent::FeedLimit`], counted in `feed_limit_reached`) | `patterns::past_its_feed_limit_a_pattern_subscription_tells_of_each_publisher_it_does_not_read`, `node::discovery::watch::tests::publishers_due_past_the_room_keep_their_retry_time` |
//! | a node serving a hostile topic listing to a pattern subscription connected to it (garbage under a good checksum, counts and lengths past the bytes or the region, names that are no topic, another node's listing, a region larger than a listing, a listing that never validates) | every length and count bounded before use (a READ at most 64 KiB, 1,024 topics of at most 200 bytes); torn READs retried at most 64 times in a row; the listing fails with a reason ([`SubscriptionEvent::ListingFailed`], counted in `listing_failures`), nothing is connected; a node serves at most 256 listing connections, each in the listing's own protection domain, reaching no other memory | `hostile::listing::*` (`a_listing_connection_reaches_no_memory_but_the_listing`, `a_node_serves_a_bounded_number_of_listing_connections`), `rdma_wire::protocol::listing::tests::*`, `patterns::a_listing_is_believed_only_from_a_node_of_the_domain` |
//! | a subscription that stops reading its discovery updates | its queue is bounded (4,096), then it catches up with the difference | `node::discovery::watch::tests::a_subscription_that_does_not_drain_gets_a_bounded_queue_then_catches_up` |
//! | subscribing without the credential, with a wrong one, or replaying a captured connect | `Unauthorized`, counted in `rejected_unauthorized` (stats file, `pubsub-demo stat`); each publisher keeps its own replay set (at most 4,096 nonces, 256 per source /24 or /64), stored only for accepted connects, and refuses rather than grows, so another topic's credential holder cannot fill it; a pattern subscription is refused topic by topic (a `Rejected` event naming each topic), the other topics go on | `hostile::access::*`, `hostile::access::a_holder_of_one_topics_credential_cannot_fill_the_nonce_set_of_another_topic`, `patterns::a_pattern_subscription_is_refused_topic_by_topic_where_it_lacks_the_credential` |
//! | a publisher advertising, or a record claiming, more than the subscriber reads | READ buffers bounded by [`SubscriberBuilder::max_record_payload`] (16 MiB); `RecordTooLarge` naming both sizes; RSS asserted in a child process | `hostile::limits::*` |
//! | a record that never validates | `recv_timeout` still returns on time | `hostile::limits::a_record_that_never_validates_does_not_hold_recv_past_its_timeout` |
//! | subscribers that post no receives and ask for doorbells (SENDs wait on RNR forever) | 4 control send slots per subscriber: others still get doorbells and `Ended { complete: true }` | `hostile::node::subscribers_that_take_no_sends_pin_only_their_own_control_slots` |
//! | silent subscribers holding a `Block` publisher | dropped after `idle_timeout` (default 30 s) with `DropReason::Idle` | `hostile::node::silent_subscribers_holding_a_blocked_publisher_are_dropped_after_the_idle_timeout` |
//! | a flood of control SENDs at an idle publisher | the CM thread's service tick drains the CQ and reposts receives every 20 ms | `hostile::node::an_idle_publishers_receive_queue_is_refilled_without_its_application` |
//! | READs outside the ring, with forged or foreign rkeys | `RemoteAccessError`, nothing moves | `hostile::reads_outside_the_ring_or_with_foreign_keys_are_refused` |
//! | READs of another topic's ring with its real address and rkey (a captured accept) | one protection domain per publisher: `RemoteAccessError`, nothing moves | `hostile::reads_outside_the_ring_or_with_foreign_keys_are_refused` |
//! | announcements of a node that left, replayed with its address taken over | a sender's first datagram must be fresh within 3 s: stale, counted, nothing connects; with a domain secret the accept must also carry a tag under it answering the connect's fresh nonce, and name the publisher discovery announced: refused before any READ, counted (`unauthenticated_accepts`) | `hostile::discovery::announcements_replayed_after_their_node_left_do_not_misdirect_a_new_subscriber`, `hostile::accepts::an_accept_without_the_domain_tag_is_refused_before_any_read`, `hostile::accepts::a_genuine_accept_replayed_to_another_connect_is_refused`, `protocol::tests::accept_tags_answer_the_challenge_under_each_secret_and_nothing_else_passes` (wire) |
//! | forged acks, garbage control messages | refused, counted (`bad_acks`), no credit | `hostile::acks_for_unpublished_positions_are_refused_counted_and_grant_no_credit` |
//! | a peer pipelines READs beyond the responder resources it was granted (raw wire) | READ depths negotiated in the connect (16 and 16 by default, as RDMA-CM's); the responder cuts a peer that exceeds them, counted; RSS asserted in a child process | `hostile::nic::a_read_flood_beyond_the_responder_resources_is_cut_and_memory_stays_bounded` |
//! | a peer that never reads its answers | 1 MiB of queued answer frames per connection (`OUT_CAP`); the NIC stops reading that peer, and cuts it after 2 s without progress, counted | `hostile::nic::a_peer_that_never_reads_its_answers_is_paused_then_cut_with_bounded_memory` |
//! | rkey guessing on one connection | the first remote access error moves the responder's queue pair to the error state: later requests are refused; the publisher removes the subscriber (a probe after 250 ms of silence fails on it) | `hostile::nic::after_a_remote_access_error_the_responder_refuses_the_connections_requests`, `hostile::node::a_subscriber_whose_queue_pair_failed_is_removed_and_holds_nothing_back`, conformance `remote_access_error_fails_the_responders_queue_pair` |
//! | a flood of connections that never finish the handshake | 64 pending per source IP, 1,024 in all, 5 s handshake timeout; the rest closed at once and counted | `hostile::nic::a_handshake_flood_from_one_source_is_capped_counted_and_spares_other_sources` |
//! | streams to the data port of queue pairs connected by hand: floods, silence, malformed or forged hellos | the same handshake limits and timeout; a stream reads one 56-byte hello and no more until it is bound; a hello out of bounds, of another peer or for no queue pair in RTR is closed and counted (`rejected_hellos`) | `rdma-fabric`'s `soft::hand_tests::*`, `soft::hello::tests::*` |
//! | local processes on the same-host path's socket: no hello, forged inbox entries or credits | a stream without a hello for an offered nonce is closed, at most 64 wait; each sender has its own inbox and a read-only credit page; inbox entries and credits are checked, and a sender that breaks them has its queue pair failed, counted (`shared_page_violations`), and nobody else notices | `rdma-fabric`'s `soft::shm::tests::*`, `soft::shm::tests::a_sender_poisoning_shared_pages_is_cut_and_nobody_else_notices` |
//! | a same-host sender into a CQ that clears or replays every page of the CQ's bell it can write (the armed word, the count of SENDs), or reads its eventfd to steal wake-ups | the owner's armed word is its own, mirrored into a page senders map read-only; each sender has its own eventfd in the owner's epoll set, taken out when its inbox closes: an owner parked on the CQ, blocking or in an event loop, is woken by an honest sender's SEND at once (the test bounds it at 1 s with a 5 s re-poll; before, it slept until its re-poll: 20 ms in the node's waits); the count is a hint that costs a forger's victim looks, or a busy poller at most 64 polls, never a wake-up; at most 1,024 senders per CQ | `rdma-fabric`'s `soft::shm::tests::a_hostile_sender_delays_no_wake_up_of_the_others`, `soft::shm::bell::tests::*` |
//! | a same-host publisher writing garbage below its ring's tail (lengths, positions, padding) | read in place, with no checksum to blame: the feed fails at once with a typed error (`RecordTooLarge` naming the claim, or `PeerMisbehaved` and a `Disconnected`); the subscription's other feeds go on; every field is bounded before use | `hostile::in_place::*`, `rdma-wire`'s `ring::sim_tests::in_place::garbage_in_the_ring_is_an_error_or_nothing_never_a_panic` |
//! | the READ buffer of a READ in flight read from safe code | [`fabric::ReadBuffer::complete`] is `unsafe`, taking the READ's completion (its one caller, the subscription's feed, states why it holds) | compile-time |
//! | `ibv_dereg_mr` failing | the buffer is leaked (never freed while it may still be registered) and counted | `rdma-fabric`'s `verbs::mr::tests::a_failed_deregistration_leaks_the_memory_and_counts_it` |
//! | a stats directory another user controls, or a link planted as its temporary file | per-user directory created 0700, refused if it is a link, another user's or writable by others; temporaries `O_EXCL \| O_NOFOLLOW` | `stats::tests::the_directory_is_created_private_and_refused_when_others_control_it`, `stats::tests::a_link_planted_as_the_temporary_file_is_not_followed` |
//! | arbitrary bytes in any decoder | no panic; fuzz targets over every format (sealed announcements and credential proofs included) | the proptests of `tests/hostile.rs`, `fuzz/` |
//!
//! # Failures
//!
//! What the user sees on each failure, and the test that shows it (the guarantees of each
//! policy are at [`Policy`]).
//!
//! | failure | what the user sees | test |
//! |---|---|---|
//! | a subscriber's connection is cut mid-READ | the victim: an intact gap-free prefix, one `Disconnected`, then `NotConnected` (or, with discovery, a reconnection); the other subscribers lose nothing; the publisher never errors | `faults::a_subscriber_connection_cut_mid_read_surfaces_and_spares_the_others` |
//! | the publisher's side of connections is cut while acks flow | every subscriber gets `Disconnected`; the publisher drops them and keeps publishing; a new subscriber joins | `faults::publisher_side_cuts_mid_ack_surface_to_every_subscriber_and_publishing_goes_on` |
//! | a subscriber process is SIGKILLed | the publisher drops it and continues; survivors lose nothing | `faults::a_subscriber_process_killed_mid_stream_is_dropped_and_the_others_lose_nothing` |
//! | a publisher process is SIGKILLed mid-write (fragmented messages) | an intact prefix, never a partial message, then `Disconnected` and `NotConnected`; with discovery, `PublisherLost{Silent}` and a reconnection when it restarts, without duplicates | `faults::a_publisher_process_killed_mid_write_leaves_an_intact_prefix_and_a_disconnect`, `discovery::a_crashed_publisher_is_detected_and_its_restart_reconnected` |
//! | a READ races a rewrite of the record | the checksum fails, the record is re-read; never delivered damaged | `torn_reads::overwritten_records_are_never_delivered_torn` (READs over the network path) |
//! | a same-host subscriber's copy of the ring in place races an overwrite | the floor the producer raised before overwriting is seen after the copy: the copy is discarded as a lap, the loss counted exactly; never delivered damaged | `rdma-wire`'s `ring::sim_tests::in_place::*` (a racing producer thread, and overwrites landing in the middle of copies) |
//! | bad or foreign connect private data | rejected with a reason, counted | `pubsub::connect_data::bad_private_data_is_rejected_with_a_reason_and_counted` |
//! | junk datagrams on the discovery group | counted, dropped, discovery goes on | `discovery::datagrams::junk_datagrams_are_counted_and_dropped` |
//! | a network partition (a host's link down, then up) | the others continue; all report `PublisherLost{Silent}`, reconnect and catch up | `multihost::three_namespaced_hosts_discover_each_other_and_survive_a_link_cut` |
//! | hostile peers (READs outside the ring, rkey guessing, floods, forged acks, missing credentials, oversized records) | see the table above | `hostile::*` |
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod counters;
pub mod error;
pub mod node;
mod reasons;
pub mod stats;

/// The fabric this crate runs on (the crate `rdma-fabric`): its configuration types are part
/// of this API ([`fabric::FabricConfig`], [`fabric::SoftOptions`], [`fabric::SameHost`]).
pub use rdma_fabric as fabric;

pub use error::{Error, Result};
pub use fabric::FabricKind;
#[cfg(feature = "async")]
pub use node::MessageStream;
pub use node::{
    DiscoveryCounters, DiscoveryOptions, ExclusivePublisher, IntoKeyExpr, IntoTopic, Loan, LossReason, LostReason,
    Message, MessageRef, MessageType, Node, NodeBuilder, NodeCounters, PeerInfo, Policy, Publisher, PublisherBuilder,
    PublisherCounters, PublisherInfo, Start, SubscriberBuilder, Subscription, SubscriptionCounters, SubscriptionEvent,
};
pub use rdma_wire::protocol::{Secret, SecretError};
pub use rdma_wire::ring::{Checksum, RingError};
pub use rdma_wire::{KeyExpr, KeyExprError, Topic, TopicError, MAX_KEY_EXPR_LEN, MAX_TOPIC_LEN};
pub use reasons::{DropReason, PolicyKind, RejectCode};

/// The README's usage example, compiled and run as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeUsage;

#[cfg(test)]
mod manifest_tests {
    /// The `[dependencies]` table of this package's manifest, one line per entry.
    fn normal_dependencies() -> Vec<&'static str> {
        let manifest = include_str!("../Cargo.toml");
        let table = manifest.split("\n[dependencies]\n").nth(1).expect("a [dependencies] table");
        let table = table.split("\n[").next().unwrap_or(table);
        table.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).collect()
    }

    #[test]
    fn the_library_does_not_depend_on_the_demos_crates() {
        let deps = normal_dependencies();
        assert!(deps.iter().any(|l| l.starts_with("thiserror")), "the table was found: {deps:?}");
        // (`nix` is the library's own since the readiness descriptor: epoll and eventfd.)
        for tool_only in ["clap", "hdrhistogram", "tracing-subscriber", "serde_json"] {
            assert!(
                !deps.iter().any(|l| l.split([' ', '=']).next() == Some(tool_only)),
                "{tool_only} is a dependency of the library, which does not use it"
            );
        }
    }
}
