//! Control messages exchanged by SEND on a subscription's queue pair. Each fits in a
//! [`CONTROL_MSG_MAX`]-byte receive buffer.
#![allow(clippy::missing_errors_doc, reason = "every decode error is a ProtocolError naming the message")]

use serde::{Deserialize, Serialize};

use super::codec::{self, kind};
use super::error::ProtocolError;

/// Size of the receive buffers control messages land in.
pub const CONTROL_MSG_MAX: usize = 64;
/// Most record bytes a [`Control::DoorbellRecords`] carries after its message.
pub const DOORBELL_RECORDS_MAX: usize = 960;
/// Size of the receive buffers of a subscriber that takes doorbells with records
/// ([`ConnectFlags::DOORBELL_RECORDS`](super::ConnectFlags::DOORBELL_RECORDS)): a control
/// message padded to [`CONTROL_MSG_MAX`], then up to [`DOORBELL_RECORDS_MAX`] bytes of records.
pub const DOORBELL_MSG_MAX: usize = CONTROL_MSG_MAX + DOORBELL_RECORDS_MAX;

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
    /// Publisher → subscriber: new data up to `tail`, and the ring's bytes from `position` on
    /// in the same SEND. The message is padded with zeros to [`CONTROL_MSG_MAX`] bytes and the
    /// ring's bytes follow, to the end of the SEND (at most [`DOORBELL_RECORDS_MAX`], never past
    /// `tail` nor the end of the data area): what a READ of them would bring, validated as such.
    /// Sent only to a subscriber that asked for it
    /// ([`ConnectFlags::DOORBELL_RECORDS`](super::ConnectFlags::DOORBELL_RECORDS)).
    DoorbellRecords {
        /// The ring position of the first byte after the message: the position the subscriber
        /// armed its doorbell at.
        position: u64,
        /// The ring's tail.
        tail: u64,
    },
}

impl Control {
    const WHAT: &'static str = "control message";

    /// Encodes (at most [`CONTROL_MSG_MAX`] bytes): version, kind (4: control), the variant's
    /// index (one byte, in declaration order: ack 0, doorbell request 1, bye 2, doorbell 3,
    /// dropped 4, end of stream 5, credit wanted 6, reads in place 7, doorbell records 8), then its fields in order, integers as the
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

    /// How many bytes of records follow this message, decoded from the first
    /// [`CONTROL_MSG_MAX`] bytes of a SEND of `message_len` bytes: none for a SEND of at most
    /// [`CONTROL_MSG_MAX`] bytes; the rest of the SEND for a
    /// [`DoorbellRecords`](Control::DoorbellRecords) of at most [`DOORBELL_MSG_MAX`].
    ///
    /// # Errors
    /// [`ProtocolError::TooLarge`] for a longer SEND, or a longer one that is not a
    /// `DoorbellRecords`; [`ProtocolError::Malformed`] when its records would pass its `tail`.
    pub fn records_len(&self, message_len: usize) -> Result<usize, ProtocolError> {
        let Some(records) = message_len.checked_sub(CONTROL_MSG_MAX).filter(|&n| n > 0) else { return Ok(0) };
        match self {
            Control::DoorbellRecords { position, tail } if message_len <= DOORBELL_MSG_MAX => {
                if tail.checked_sub(*position).is_none_or(|written| written < records as u64) {
                    let detail = format!("{records} bytes of records from {position} pass the tail {tail}");
                    return Err(ProtocolError::Malformed { what: Self::WHAT, detail });
                }
                Ok(records)
            }
            Control::DoorbellRecords { .. } => {
                Err(ProtocolError::TooLarge { what: Self::WHAT, len: message_len, max: DOORBELL_MSG_MAX })
            }
            _ => Err(ProtocolError::TooLarge { what: Self::WHAT, len: message_len, max: CONTROL_MSG_MAX }),
        }
    }
}
