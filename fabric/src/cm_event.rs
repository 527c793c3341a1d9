//! The connection-manager event, defined once for every layer that carries one: generic over
//! what a connect request is at that layer (the public [`ConnectRequest`](super::ConnectRequest)
//! handle, a provider's own connect request, the soft NIC's pending connection).

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

/// An event about an existing connection: a [`CmEventOf`] that cannot be a connect request.
pub type ConnectionEvent = CmEventOf<std::convert::Infallible>;

impl<R> CmEventOf<R> {
    /// The same event with its connect request turned into an `S` by `f`; every other event
    /// is moved over unchanged.
    pub fn map_request<S>(self, f: impl FnOnce(R) -> S) -> CmEventOf<S> {
        match self.try_map_request(|request| Ok::<S, std::convert::Infallible>(f(request))) {
            Ok(event) => event,
            Err(never) => match never {},
        }
    }

    /// As [`map_request`](Self::map_request), with an `f` that may fail: its error is returned
    /// instead of the event.
    ///
    /// # Errors
    /// The error of `f`, when the event is a connect request and `f` fails.
    pub fn try_map_request<S, E>(self, f: impl FnOnce(R) -> Result<S, E>) -> Result<CmEventOf<S>, E> {
        Ok(match self {
            CmEventOf::ConnectRequest(request) => CmEventOf::ConnectRequest(f(request)?),
            CmEventOf::Established { conn, private_data } => CmEventOf::Established { conn, private_data },
            CmEventOf::Rejected { conn, reason, private_data } => CmEventOf::Rejected { conn, reason, private_data },
            CmEventOf::Unreachable { conn, detail } => CmEventOf::Unreachable { conn, detail },
            CmEventOf::Disconnected { conn } => CmEventOf::Disconnected { conn },
        })
    }
}

impl<R> CmEventOf<R> {
    /// This event as one about an existing connection (a [`ConnectionEvent`]).
    ///
    /// # Errors
    /// The request, when the event is a connect request.
    pub fn into_connection_event(self) -> Result<ConnectionEvent, R> {
        self.try_map_request(Err)
    }

    /// The connection the event is about (`None` for a connect request, whose connection the
    /// request itself names).
    pub fn conn(&self) -> Option<ConnId> {
        match self {
            CmEventOf::ConnectRequest(_) => None,
            CmEventOf::Established { conn, .. }
            | CmEventOf::Rejected { conn, .. }
            | CmEventOf::Unreachable { conn, .. }
            | CmEventOf::Disconnected { conn } => Some(*conn),
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

    #[test]
    fn a_connection_event_is_every_event_but_a_request_and_names_its_connection() {
        let mut events = one_of_each("request").into_iter();
        assert!(matches!(events.next().map(CmEventOf::into_connection_event), Some(Err("request"))));
        let rest: Vec<ConnectionEvent> = events.map(|e| e.into_connection_event().expect("not a request")).collect();
        assert_eq!(rest.iter().map(|e| e.conn()).collect::<Vec<_>>(), [Some(1), Some(2), Some(3), Some(4)]);
        assert_eq!(format!("{rest:?}"), format!("{:?}", &one_of_each("request")[1..]));
        assert_eq!(CmEventOf::ConnectRequest(()).conn(), None);
    }
}
