//! What a subscription hands out: [`rps_message_view`], the fields of a message (borrowed or
//! owned), the owned [`rps_message`] of the copying receive, and [`rps_event`].

use std::ffi::c_char;

use pubsub::{Message, PublisherInfo, RejectCode, SubscriptionEvent, Topic};

use crate::handle::{handle_ref, out_ptr, take_handle};
use crate::status::{guard, guard_void, rps_status};

/// A message's payload and origin. From `rps_subscription_recv_ref`, `data` and `topic` point
/// into the subscription (its READ buffer: zero copy) until `rps_subscription_release`; from
/// `rps_message_get_view`, into the `rps_message` until it is destroyed; from
/// `rps_subscription_recv_into`, `topic` points into the subscription until its next receive.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct rps_message_view {
    /// The payload (not NUL-terminated; any pointer when `len` is 0).
    pub data: *const u8,
    /// Its length in bytes.
    pub len: usize,
    /// Its sequence number in its publisher's stream (1, 2, ...).
    pub seq: u64,
    /// The publisher's id.
    pub publisher_id: u64,
    /// The publisher's node's epoch (a restarted node has a larger one).
    pub publisher_epoch: u64,
    /// The message's topic, UTF-8 (not NUL-terminated): on a pattern subscription, the topic
    /// of the publisher that matched.
    pub topic: *const c_char,
    /// Its length in bytes.
    pub topic_len: usize,
}

impl rps_message_view {
    /// The view of `data` from `publisher`'s message `seq` on `topic`.
    pub(crate) fn new(data: &[u8], seq: u64, publisher: &PublisherInfo, topic: &Topic) -> rps_message_view {
        rps_message_view {
            data: data.as_ptr(),
            len: data.len(),
            seq,
            publisher_id: publisher.id,
            publisher_epoch: publisher.epoch,
            topic: topic.as_str().as_ptr().cast(),
            topic_len: topic.as_str().len(),
        }
    }
}

/// A received message, owned by the application (the copying receive): read it with
/// [`rps_message_get_view`], free it with [`rps_message_destroy`].
#[allow(non_camel_case_types)]
pub struct rps_message {
    pub(crate) message: Message,
}

/// The view of `message` in `*view`: valid until the message is destroyed.
///
/// # Safety
/// `message` is NULL or a live message; `view` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rps_message_get_view(message: *const rps_message, view: *mut rps_message_view) -> rps_status {
    guard(|| {
        // SAFETY: the caller's contract, argument by argument.
        let (message, view) = unsafe { (handle_ref(message, "message")?, out_ptr(view, "view")?) };
        let m = &message.message;
        *view = rps_message_view::new(&m.data, m.seq, &m.publisher, &m.topic);
        Ok(rps_status::RPS_OK)
    })
}

/// Destroys the message in `*message` and sets `*message` to NULL; nothing when either is
/// NULL.
///
/// # Safety
/// `message` is NULL or points to NULL or to a message made by this library.
#[no_mangle]
pub unsafe extern "C" fn rps_message_destroy(message: *mut *mut rps_message) {
    // SAFETY: the caller's contract is `take_handle`'s.
    guard_void(|| drop(unsafe { take_handle(message) }));
}

/// What happened to a subscription's connections (`rps_event.kind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_event_kind {
    /// Connected to a publisher (`publisher_id`).
    RPS_EVENT_CONNECTED = 0,
    /// An overrun (`RPS_POLICY_OVERWRITE`): `value` messages were lost.
    RPS_EVENT_LOST = 1,
    /// A publisher's stream ended: `value` is its last sequence number.
    RPS_EVENT_ENDED = 2,
    /// The publisher dropped this subscriber (too slow, idle, ...: see `detail`).
    RPS_EVENT_DROPPED = 3,
    /// A message over `max_message_len` (`value`: its length); its connection was closed.
    RPS_EVENT_MESSAGE_TOO_LARGE = 4,
    /// The publisher's records are larger than this subscription reads (`value`: their size).
    RPS_EVENT_RECORD_TOO_LARGE = 5,
    /// A connection was lost.
    RPS_EVENT_DISCONNECTED = 6,
    /// A publisher refused the subscription (`reject_code`, `detail`).
    RPS_EVENT_REJECTED = 7,
    /// No node answered at an address.
    RPS_EVENT_UNREACHABLE = 8,
    /// Discovery says a publisher is gone.
    RPS_EVENT_PUBLISHER_LOST = 9,
    /// An event of a newer library (see `detail`).
    RPS_EVENT_OTHER = 10,
    /// A publisher's accept did not prove what the subscription requires (domain secret,
    /// credential, the announced publisher): refused before anything was read.
    RPS_EVENT_UNAUTHENTICATED = 11,
    /// A publisher matching the subscription's pattern was not connected: the subscription
    /// reads `max_feeds` (`value`) publishers already; it is connected once one goes.
    RPS_EVENT_FEED_LIMIT = 12,
    /// The topic listing of the node a pattern subscription was connected to failed (refused,
    /// unauthenticated, invalid or broken: see `detail`); the publishers connected already go on.
    RPS_EVENT_LISTING_FAILED = 13,
}

/// Why a publisher refused a subscription (`rps_event.reject_code` of `RPS_EVENT_REJECTED`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rps_reject_code {
    /// Not a refusal.
    RPS_REJECT_NONE = 0,
    /// No publisher of that topic on that node.
    RPS_REJECT_UNKNOWN_TOPIC = 1,
    /// The two nodes speak different protocol versions.
    RPS_REJECT_VERSION_MISMATCH = 2,
    /// The request did not decode.
    RPS_REJECT_MALFORMED = 3,
    /// The topic's policy is not one the subscriber accepts.
    RPS_REJECT_POLICY_NOT_ACCEPTED = 4,
    /// The publisher serves as many subscribers as it can.
    RPS_REJECT_TOO_MANY_SUBSCRIBERS = 5,
    /// The publisher is closing.
    RPS_REJECT_SHUTTING_DOWN = 6,
    /// The subscription did not prove the topic's credential.
    RPS_REJECT_UNAUTHORIZED = 7,
    /// A reason of a newer library (see `detail`).
    RPS_REJECT_OTHER = 8,
    /// The publisher's messages are of another type than the subscription's (both named in
    /// `detail`).
    RPS_REJECT_TYPE_MISMATCH = 9,
}

/// Bytes of `rps_event.detail`, its NUL included.
pub const RPS_EVENT_DETAIL_LEN: usize = 256;

/// An event of a subscription's connections (`rps_subscription_try_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct rps_event {
    /// What happened.
    pub kind: rps_event_kind,
    /// Why, for `RPS_EVENT_REJECTED`; `RPS_REJECT_NONE` otherwise.
    pub reject_code: rps_reject_code,
    /// The publisher's id, when the event names one (else 0).
    pub publisher_id: u64,
    /// A number the kind gives meaning to (lost count, last sequence number, length), else 0.
    pub value: u64,
    /// The whole event in words, NUL-terminated (cut at a character boundary if long).
    pub detail: [c_char; RPS_EVENT_DETAIL_LEN],
}

impl rps_event {
    /// The C form of `event`.
    pub(crate) fn from_event(event: &SubscriptionEvent) -> rps_event {
        use rps_event_kind::*;
        let id = |p: &PublisherInfo| p.id;
        let (kind, publisher_id, value, reject_code) = match event {
            SubscriptionEvent::Connected(p) => (RPS_EVENT_CONNECTED, id(p), 0, None),
            SubscriptionEvent::Lost { publisher, count, .. } => (RPS_EVENT_LOST, id(publisher), *count, None),
            SubscriptionEvent::Ended { publisher, final_seq, .. } => (RPS_EVENT_ENDED, id(publisher), *final_seq, None),
            SubscriptionEvent::Dropped { publisher, .. } => (RPS_EVENT_DROPPED, id(publisher), 0, None),
            SubscriptionEvent::MessageTooLarge { publisher, len, .. } => {
                (RPS_EVENT_MESSAGE_TOO_LARGE, id(publisher), *len, None)
            }
            SubscriptionEvent::RecordTooLarge { len, .. } => (RPS_EVENT_RECORD_TOO_LARGE, 0, *len, None),
            SubscriptionEvent::Disconnected { publisher, .. } => {
                (RPS_EVENT_DISCONNECTED, publisher.as_ref().map_or(0, id), 0, None)
            }
            SubscriptionEvent::Rejected { reason, .. } => (RPS_EVENT_REJECTED, 0, 0, Some(*reason)),
            SubscriptionEvent::Unreachable { .. } => (RPS_EVENT_UNREACHABLE, 0, 0, None),
            SubscriptionEvent::PublisherLost { .. } => (RPS_EVENT_PUBLISHER_LOST, 0, 0, None),
            SubscriptionEvent::Unauthenticated { .. } => (RPS_EVENT_UNAUTHENTICATED, 0, 0, None),
            SubscriptionEvent::FeedLimit { limit, .. } => (RPS_EVENT_FEED_LIMIT, 0, *limit as u64, None),
            SubscriptionEvent::ListingFailed { .. } => (RPS_EVENT_LISTING_FAILED, 0, 0, None),
            _ => (RPS_EVENT_OTHER, 0, 0, None),
        };
        let reject_code = match reject_code {
            None => rps_reject_code::RPS_REJECT_NONE,
            Some(RejectCode::UnknownTopic) => rps_reject_code::RPS_REJECT_UNKNOWN_TOPIC,
            Some(RejectCode::VersionMismatch) => rps_reject_code::RPS_REJECT_VERSION_MISMATCH,
            Some(RejectCode::Malformed) => rps_reject_code::RPS_REJECT_MALFORMED,
            Some(RejectCode::PolicyNotAccepted) => rps_reject_code::RPS_REJECT_POLICY_NOT_ACCEPTED,
            Some(RejectCode::TooManySubscribers) => rps_reject_code::RPS_REJECT_TOO_MANY_SUBSCRIBERS,
            Some(RejectCode::ShuttingDown) => rps_reject_code::RPS_REJECT_SHUTTING_DOWN,
            Some(RejectCode::Unauthorized) => rps_reject_code::RPS_REJECT_UNAUTHORIZED,
            Some(RejectCode::TypeMismatch) => rps_reject_code::RPS_REJECT_TYPE_MISMATCH,
            Some(_) => rps_reject_code::RPS_REJECT_OTHER,
        };
        let mut detail = [0 as c_char; RPS_EVENT_DETAIL_LEN];
        let text = format!("{event:?}");
        let mut end = text.len().min(RPS_EVENT_DETAIL_LEN - 1);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        for (d, b) in detail.iter_mut().zip(text[..end].bytes().filter(|&b| b != 0)) {
            *d = b as c_char;
        }
        rps_event { kind, reject_code, publisher_id, value, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed listing reaches C as its own kind, with the node and the reason in the detail.
    #[test]
    fn a_failed_listing_has_its_own_event_kind() {
        let event = SubscriptionEvent::ListingFailed {
            addr: "127.0.0.1:7000".parse().expect("an address"),
            detail: "refused".into(),
        };
        let c = rps_event::from_event(&event);
        assert_eq!(c.kind, rps_event_kind::RPS_EVENT_LISTING_FAILED);
        let detail: String = c.detail.iter().take_while(|&&b| b != 0).map(|&b| b as u8 as char).collect();
        assert!(detail.contains("127.0.0.1:7000") && detail.contains("refused"), "{detail}");
    }
}
