//! Control messages exchanged by SEND on a subscription's queue pair. Each fits in a
//! [`CONTROL_MSG_MAX`]-byte receive buffer.
#![allow(clippy::missing_errors_doc, reason = "every decode error is a ProtocolError naming the message")]

use serde::{Deserialize, Serialize};

use super::codec::{self, kind};
use super::error::ProtocolError;

/// Size of the receive buffers control messages land in.
pub const CONTROL_MSG_MAX: usize = 64;

/// Why a publisher dropped a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DropReason {
    /// DropSlow policy: the subscriber fell `lag` bytes behind (a whole ring).
    TooSlow {
        /// How far behind the tail its last acknowledgement was.
        lag: u64,
    },
    /// The subscriber broke the protocol (bad acknowledgement, garbage message).
    ProtocolViolation,
    /// The publisher is closing.
    ShuttingDown,
    /// The subscriber was idle for `millis`: it held the publisher back without acking, or
    /// took none of its control messages (see `PublisherBuilder::idle_timeout`).
    Idle {
        /// How long it was idle.
        millis: u64,
    },
}

/// A control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Control {
    /// Subscriber → publisher: everything before `position` is consumed (credit for flow
    /// control); `seq` is the last message delivered or accounted as lost.
    Ack {
        /// Absolute ring position consumed up to.
        position: u64,
        /// Last sequence consumed.
        seq: u64,
    },
    /// Subscriber → publisher: (dis)arm a doorbell for when the tail passes `position`.
    DoorbellRequest {
        /// Whether a doorbell is wanted.
        armed: bool,
        /// The subscriber's position: ring only when the tail is past it.
        position: u64,
    },
    /// Subscriber → publisher: the subscriber is leaving.
    Bye,
    /// Publisher → subscriber: new data up to `tail`.
    Doorbell {
        /// The ring's tail.
        tail: u64,
    },
    /// Publisher → subscriber: the subscription is over.
    Dropped {
        /// Why.
        reason: DropReason,
    },
    /// Publisher → subscriber: the publisher closed the topic after message `final_seq`.
    EndOfStream {
        /// The last sequence published.
        final_seq: u64,
    },
    /// Publisher → subscriber: the publisher waits for credit; ack, as a solicited SEND, once
    /// the consumed position reaches `position` (at once if it has).
    CreditWanted {
        /// The position to ack.
        position: u64,
    },
    /// Subscriber → publisher: the subscriber reads the ring in place (same host), with no
    /// READ: its records need no checksum for it.
    ReadsInPlace,
}

impl Control {
    const WHAT: &'static str = "control message";

    /// Encodes (at most [`CONTROL_MSG_MAX`] bytes): version, kind (4: control), the variant's
    /// index (one byte, in declaration order: ack 0, doorbell request 1, bye 2, doorbell 3,
    /// dropped 4, end of stream 5, credit wanted 6, reads in place 7), then its fields in order, integers as the
    /// varints of [`ConnectData::encode`](super::ConnectData::encode) (1–9 bytes), a bool as
    /// one byte, and a [`DropReason`] as its index (too slow 0, protocol violation 1, shutting
    /// down 2, idle 3) followed by its field. The largest, an ack, is 2 + 1 + 9 + 9 = 21 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        codec::encode(Self::WHAT, kind::CONTROL, self, CONTROL_MSG_MAX)
    }

    /// Decodes one received message.
    pub fn decode(bytes: &[u8]) -> Result<Control, ProtocolError> {
        codec::decode(Self::WHAT, kind::CONTROL, bytes, CONTROL_MSG_MAX)
    }
}
