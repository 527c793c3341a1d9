//! The connection-manager event, defined once for every layer that carries one: generic over
//! what a connect request is at that layer (the public [`ConnectRequest`](super::ConnectRequest)
//! handle, a provider's `Box<dyn ConnRequestOps>`, a provider's own pending connection).

use super::types::{ConnId, RejectReason};

/// A connection-manager event whose connect request is an `R`. Callers see
/// [`CmEvent`](super::CmEvent), which is this with the public
/// [`ConnectRequest`](super::ConnectRequest); providers produce it with their own request type
/// and the layer above turns it into its own with [`map_request`](Self::map_request).
#[derive(Debug)]
pub enum CmEventOf<R> {
    /// A peer asks to connect: accept or reject it (dropping the public handle rejects).
    ConnectRequest(R),
    /// The connection is up (on both sides); on the active side it carries the accept's
    /// private data.
    Established {
        /// Which connection.
        conn: ConnId,
        /// The accept's private data (empty on the passive side).
        private_data: Vec<u8>,
    },
    /// The peer rejected the connect request.
    Rejected {
        /// Which connection.
        conn: ConnId,
        /// Why.
        reason: RejectReason,
        /// The reject's private data.
        private_data: Vec<u8>,
    },
    /// The peer could not be reached.
    Unreachable {
        /// Which connection.
        conn: ConnId,
        /// What failed.
        detail: String,
    },
    /// The connection is gone (either side disconnected, or the transport failed).
    Disconnected {
        /// Which connection.
        conn: ConnId,
    },
}

impl<R> CmEventOf<R> {
    /// The same event with its connect request turned into an `S` by `f`; every other event
    /// is moved over unchanged.
    pub fn map_request<S>(self, f: impl FnOnce(R) -> S) -> CmEventOf<S> {
        match self {
            CmEventOf::ConnectRequest(request) => CmEventOf::ConnectRequest(f(request)),
            CmEventOf::Established { conn, private_data } => CmEventOf::Established { conn, private_data },
            CmEventOf::Rejected { conn, reason, private_data } => CmEventOf::Rejected { conn, reason, private_data },
            CmEventOf::Unreachable { conn, detail } => CmEventOf::Unreachable { conn, detail },
            CmEventOf::Disconnected { conn } => CmEventOf::Disconnected { conn },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events a layer passes up, one of each kind, with a request of type `R`.
    fn one_of_each<R>(request: R) -> Vec<CmEventOf<R>> {
        vec![
            CmEventOf::ConnectRequest(request),
            CmEventOf::Established { conn: 1, private_data: vec![1, 2] },
            CmEventOf::Rejected { conn: 2, reason: RejectReason::Other(-7), private_data: vec![3] },
            CmEventOf::Unreachable { conn: 3, detail: "no route".into() },
            CmEventOf::Disconnected { conn: 4 },
        ]
    }

    #[test]
    fn map_request_converts_the_request_and_moves_every_other_event_unchanged() {
        let mapped: Vec<CmEventOf<String>> =
            one_of_each(41u32).into_iter().map(|e| e.map_request(|r| format!("request {}", r + 1))).collect();
        let expected = one_of_each("request 42".to_string());
        assert_eq!(format!("{mapped:?}"), format!("{expected:?}"));
    }
}
