//! The bounds of what discovery keeps of its peers, whatever is sent to its port.

/// Most peers a node keeps in its directory; announcements of further nodes are refused
/// (and counted) until known peers leave or expire.
pub const MAX_PEERS: usize = 1024;
/// Most datagrams (parts) one node's announcement may be split into.
pub const MAX_PARTS: usize = 256;
/// Most topics one peer may announce.
pub const MAX_PEER_TOPICS: usize = 8192;
/// Most topics of all peers together. With topic names of at most 200 bytes, the directory
/// stays within a few tens of MiB whatever is sent to the discovery port.
pub const MAX_TOTAL_TOPICS: usize = 65_536;
