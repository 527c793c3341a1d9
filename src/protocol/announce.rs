//! Discovery announcements sent by UD multicast: which node publishes which topics, and
//! where to connect. A topic list longer than one datagram is split into numbered parts.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::codec::{self, kind};
use super::error::ProtocolError;
use super::topic::TopicId;

/// Default largest announcement datagram.
pub const ANNOUNCE_MTU: usize = 1024;
/// Largest announcement any decoder accepts.
pub const MAX_ANNOUNCEMENT: usize = 65_507;

/// What an announcement says about its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AnnounceKind {
    /// A node started (or its topics changed): peers should learn it now.
    Hello,
    /// Periodic refresh.
    Heartbeat,
    /// The node is leaving: forget it.
    Goodbye,
}

/// One datagram of a node's announcement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announcement {
    /// Hello, heartbeat or goodbye.
    pub kind: AnnounceKind,
    /// The discovery domain of the announcing node: nodes hear only their own domain.
    pub domain: u16,
    /// The announcing node.
    pub node_id: u64,
    /// Its epoch (a restarted node has a new one).
    pub epoch: u64,
    /// Where subscribers connect (IP and port; an IPv6 flow label and scope id are not carried).
    pub connect: SocketAddr,
    /// Index of this part, `0..parts`.
    pub part: u16,
    /// Number of parts of this announcement.
    pub parts: u16,
    /// Topics in this part: name and id.
    pub topics: Vec<(String, TopicId)>,
}

impl Announcement {
    const WHAT: &'static str = "announcement";

    /// Encodes (at most [`MAX_ANNOUNCEMENT`] bytes; [`Announcement::split`] keeps parts within
    /// an MTU).
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        codec::encode(Self::WHAT, kind::ANNOUNCEMENT, self, MAX_ANNOUNCEMENT)
    }

    /// Decodes one datagram, checking the part numbering.
    pub fn decode(bytes: &[u8]) -> Result<Announcement, ProtocolError> {
        let a: Announcement = codec::decode(Self::WHAT, kind::ANNOUNCEMENT, bytes, MAX_ANNOUNCEMENT)?;
        if a.part >= a.parts {
            return Err(ProtocolError::Malformed {
                what: Self::WHAT,
                detail: format!("part {} of {}", a.part, a.parts),
            });
        }
        Ok(a)
    }

    /// Packs `topics` into as few announcements as possible, each encoding to at most `mtu`
    /// bytes (an empty list gives one part). A topic too long for one datagram is an error.
    pub fn split(
        kind: AnnounceKind,
        domain: u16,
        node_id: u64,
        epoch: u64,
        connect: SocketAddr,
        topics: &[(String, TopicId)],
        mtu: usize,
    ) -> Result<Vec<Announcement>, ProtocolError> {
        let empty =
            Announcement { kind, domain, node_id, epoch, connect, part: u16::MAX, parts: u16::MAX, topics: Vec::new() };
        // The list length is a varint: 1 byte for an empty list, at most 3 below 65536 entries.
        let base = empty.encode()?.len() + 2;
        let entry_len = |t: &(String, TopicId)| {
            bincode::serde::encode_to_vec(t, bincode::config::standard())
                .map(|v| v.len())
                .map_err(|e| ProtocolError::Malformed { what: Self::WHAT, detail: e.to_string() })
        };
        let mut parts: Vec<Vec<(String, TopicId)>> = vec![Vec::new()];
        let mut size = base;
        for t in topics {
            let n = entry_len(t)?;
            if base + n > mtu {
                return Err(ProtocolError::TooLarge { what: "announced topic", len: base + n, max: mtu });
            }
            if size + n > mtu {
                parts.push(Vec::new());
                size = base;
            }
            parts.last_mut().expect("one part").push(t.clone());
            size += n;
        }
        let count = u16::try_from(parts.len()).map_err(|_| ProtocolError::TooLarge {
            what: "announcement parts",
            len: parts.len(),
            max: u16::MAX as usize,
        })?;
        let out: Vec<Announcement> = parts
            .into_iter()
            .enumerate()
            .map(|(i, topics)| Announcement {
                kind,
                domain,
                node_id,
                epoch,
                connect,
                part: i as u16,
                parts: count,
                topics,
            })
            .collect();
        for a in &out {
            let len = a.encode()?.len();
            if len > mtu {
                return Err(ProtocolError::TooLarge { what: Self::WHAT, len, max: mtu });
            }
        }
        Ok(out)
    }
}
