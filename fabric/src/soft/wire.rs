//! The soft provider's wire protocol on one TCP connection (one RC queue pair): a fixed
//! 32-byte little-endian header, optionally followed by `len` payload bytes.
//!
//! Layout: `version u8 | type u8 | status u8 | reserved u8 | psn u32 | len u32 | rkey u32 |
//! addr u64 | imm u32 | aux u32`. The decoder rejects anything malformed (unknown type or
//! status, payload lengths over the limits of the frame type) without panicking.
#![allow(clippy::missing_errors_doc, reason = "the soft provider's frame codec")]

use crate::types::{
    WcStatus, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA, RNR_RETRY_INFINITE,
};

/// Size of every frame header.
pub const HEADER_LEN: usize = 32;
/// Protocol version carried in byte 0 (2: the connect and accept carry the READ depths).
pub const VERSION: u8 = 2;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    /// Connect request; payload = private data, aux = the requester's [`CmParams`].
    ConnectReq = 1,
    /// Accept; payload = private data, aux = the acceptor's [`CmParams`].
    Accept = 2,
    /// Reject; payload = private data.
    Reject = 3,
    /// Orderly disconnect.
    Disconnect = 4,
    /// SEND; payload = message.
    Send = 5,
    /// SEND with immediate (`imm`).
    SendImm = 6,
    /// RDMA WRITE of the payload at `addr`/`rkey`.
    Write = 7,
    /// RDMA READ request of `aux` bytes at `addr`/`rkey`.
    ReadReq = 8,
    /// READ response: payload = data, or a NAK status without payload.
    ReadResp = 9,
    /// Acknowledgement of a SEND or WRITE (status 0) or its NAK.
    Ack = 10,
    /// First frame each way on the stream of a queue pair connected by hand: payload = the
    /// sender's and the addressed queue pair's numbers and PSNs ([`HELLO_LEN`] bytes, see
    /// `soft::hello`); the header carries the sender's same-host offer as a CONNECT_REQ does.
    Hello = 11,
    /// A queue pair connected by hand moved to RTS: aux = its [`CmParams`] (its RNR retries,
    /// which the peer applies to its SENDs, and its READ depths).
    Ready = 12,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => FrameType::ConnectReq,
            2 => FrameType::Accept,
            3 => FrameType::Reject,
            4 => FrameType::Disconnect,
            5 => FrameType::Send,
            6 => FrameType::SendImm,
            7 => FrameType::Write,
            8 => FrameType::ReadReq,
            9 => FrameType::ReadResp,
            10 => FrameType::Ack,
            11 => FrameType::Hello,
            12 => FrameType::Ready,
            _ => return None,
        })
    }
}

/// Outcome a responder reports in an `Ack` or `ReadResp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// Bad rkey, out of bounds, or missing access rights.
    RemoteAccess = 1,
    /// The responder could not execute it (message longer than the posted receive).
    InvalidRequest = 2,
    /// No receive was posted within the requester's RNR retries.
    RnrExceeded = 3,
    /// The responder's queue pair is in the error state.
    OperationError = 4,
}

impl Status {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::RemoteAccess,
            2 => Status::InvalidRequest,
            3 => Status::RnrExceeded,
            4 => Status::OperationError,
            _ => return None,
        })
    }

    /// The completion status the requester reports.
    pub fn wc_status(self) -> WcStatus {
        match self {
            Status::Ok => WcStatus::Success,
            Status::RemoteAccess => WcStatus::RemoteAccessError,
            Status::InvalidRequest => WcStatus::RemoteInvalidRequest,
            Status::RnrExceeded => WcStatus::RnrRetryExceeded,
            Status::OperationError => WcStatus::RemoteOperationError,
        }
    }
}

/// Payload bytes of a `Hello` frame.
pub const HELLO_LEN: usize = 24;

/// `aux` of a `Send`/`SendImm` frame posted solicited (else 0).
pub const AUX_SOLICITED: u32 = 1;

/// What each end of a connection tells the other in its CONNECT_REQ or ACCEPT (`aux`), as
/// RDMA-CM's connection parameters: `rnr_retry` in bits 0-7 (at most 7), the initiator depth in
/// bits 8-15 and the responder resources in bits 16-23 (each at least 1), bits 24-31 zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmParams {
    /// RNR retries of the sender's SENDs (7 = forever).
    pub rnr_retry: u8,
    /// RDMA READs the sender may have outstanding.
    pub initiator_depth: u8,
    /// RDMA READs of the peer the sender serves at once.
    pub responder_resources: u8,
}

impl CmParams {
    /// The `aux` field carrying these parameters.
    pub fn to_aux(self) -> u32 {
        u32::from(self.rnr_retry) | u32::from(self.initiator_depth) << 8 | u32::from(self.responder_resources) << 16
    }

    /// The parameters an `aux` field carries, if it is valid.
    pub fn from_aux(aux: u32) -> Option<CmParams> {
        let [rnr_retry, initiator_depth, responder_resources, high] = aux.to_le_bytes();
        let valid = rnr_retry <= RNR_RETRY_INFINITE && initiator_depth > 0 && responder_resources > 0 && high == 0;
        valid.then_some(CmParams { rnr_retry, initiator_depth, responder_resources })
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Frame type.
    pub ty: FrameType,
    /// Responder status (`Ack`, `ReadResp`), else `Ok`.
    pub status: Status,
    /// Request sequence number, echoed by the responder.
    pub psn: u32,
    /// Payload length following the header.
    pub len: u32,
    /// Remote key (READ/WRITE).
    pub rkey: u32,
    /// Remote address (READ/WRITE).
    pub addr: u64,
    /// Immediate data (`SendImm`).
    pub imm: u32,
    /// Type-specific: READ length, solicited flag of SENDs, or [`CmParams`] in CM frames.
    pub aux: u32,
}

/// Why bytes from the network are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Byte 0 is not our version.
    #[error("unknown protocol version {0}")]
    Version(u8),
    /// Unknown frame type.
    #[error("unknown frame type {0}")]
    Type(u8),
    /// Unknown or misplaced status.
    #[error("invalid status {status} in a {ty:?} frame")]
    Status {
        /// The frame type.
        ty: FrameType,
        /// The raw status.
        status: u8,
    },
    /// Reserved byte not zero.
    #[error("reserved header byte is {0}")]
    Reserved(u8),
    /// Payload length over the limit of this frame type.
    #[error("{ty:?} frame with {len} payload bytes (limit {max})")]
    Length {
        /// The frame type.
        ty: FrameType,
        /// The length announced.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// An aux field out of range.
    #[error("{ty:?} frame with invalid aux value {aux}")]
    Aux {
        /// The frame type.
        ty: FrameType,
        /// The value.
        aux: u32,
    },
}

impl Header {
    /// A header of type `ty` with every other field zero.
    pub fn new(ty: FrameType) -> Self {
        Header { ty, status: Status::Ok, psn: 0, len: 0, rkey: 0, addr: 0, imm: 0, aux: 0 }
    }

    /// The 32 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[1] = self.ty as u8;
        b[2] = self.status as u8;
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b[24..28].copy_from_slice(&self.imm.to_le_bytes());
        b[28..32].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    /// Decodes and validates a header; `max_msg` bounds data payloads and READ lengths.
    pub fn decode(b: &[u8; HEADER_LEN], max_msg: u64) -> Result<Header, WireError> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if b[0] != VERSION {
            return Err(WireError::Version(b[0]));
        }
        let ty = FrameType::from_u8(b[1]).ok_or(WireError::Type(b[1]))?;
        let status = Status::from_u8(b[2]).ok_or(WireError::Status { ty, status: b[2] })?;
        if b[3] != 0 {
            return Err(WireError::Reserved(b[3]));
        }
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[16..24]);
        let h = Header {
            ty,
            status,
            psn: u32_at(4),
            len: u32_at(8),
            rkey: u32_at(12),
            addr: u64::from_le_bytes(addr),
            imm: u32_at(24),
            aux: u32_at(28),
        };
        if status != Status::Ok && !matches!(ty, FrameType::Ack | FrameType::ReadResp) {
            return Err(WireError::Status { ty, status: b[2] });
        }
        let max_len = match ty {
            FrameType::ConnectReq => MAX_CONNECT_PRIVATE_DATA as u64,
            FrameType::Accept => MAX_ACCEPT_PRIVATE_DATA as u64,
            FrameType::Reject => MAX_REJECT_PRIVATE_DATA as u64,
            FrameType::Hello => HELLO_LEN as u64,
            FrameType::Disconnect | FrameType::Ack | FrameType::ReadReq | FrameType::Ready => 0,
            FrameType::ReadResp if status != Status::Ok => 0,
            FrameType::Send | FrameType::SendImm | FrameType::Write | FrameType::ReadResp => max_msg,
        };
        // A hello has exactly its length: its fields, nothing more or less.
        if u64::from(h.len) > max_len || (ty == FrameType::Hello && h.len as usize != HELLO_LEN) {
            return Err(WireError::Length { ty, len: h.len.into(), max: max_len });
        }
        let aux_ok = match ty {
            FrameType::ConnectReq | FrameType::Accept | FrameType::Ready => CmParams::from_aux(h.aux).is_some(),
            FrameType::Hello => h.aux == 0,
            FrameType::ReadReq => u64::from(h.aux) <= max_msg,
            FrameType::Send | FrameType::SendImm => h.aux <= AUX_SOLICITED,
            _ => true,
        };
        if !aux_ok {
            return Err(WireError::Aux { ty, aux: h.aux });
        }
        Ok(h)
    }

    /// Whether the payload is small control data delivered whole (CM frames, and the hello
    /// and readiness of queue pairs connected by hand).
    pub fn is_control(&self) -> bool {
        matches!(
            self.ty,
            FrameType::ConnectReq
                | FrameType::Accept
                | FrameType::Reject
                | FrameType::Disconnect
                | FrameType::Hello
                | FrameType::Ready
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 31;

    #[test]
    fn every_frame_type_round_trips() {
        for ty in 1..=12u8 {
            let ty = FrameType::from_u8(ty).unwrap();
            let mut h = Header::new(ty);
            h.psn = 0xDEAD_BEEF;
            h.rkey = 0x1234_5678;
            h.addr = 0x7fff_0000_1000;
            h.imm = 42;
            h.aux = match ty {
                FrameType::ConnectReq | FrameType::Accept | FrameType::Ready => {
                    CmParams { rnr_retry: 7, initiator_depth: 16, responder_resources: 255 }.to_aux()
                }
                FrameType::ReadReq => 1 << 20,
                FrameType::Hello => 0,
                FrameType::Send | FrameType::SendImm => AUX_SOLICITED,
                _ => 9,
            };
            h.len = match ty {
                FrameType::ConnectReq => 56,
                FrameType::Accept => 196,
                FrameType::Reject => 148,
                FrameType::Hello => HELLO_LEN as u32,
                FrameType::Disconnect | FrameType::Ack | FrameType::ReadReq | FrameType::Ready => 0,
                _ => 1 << 20,
            };
            if ty == FrameType::Ack {
                h.status = Status::RnrExceeded;
            }
            assert_eq!(Header::decode(&h.encode(), MAX), Ok(h), "{ty:?}");
        }
        let mut send = Header::new(FrameType::Send);
        send.aux = AUX_SOLICITED + 1;
        assert!(
            matches!(Header::decode(&send.encode(), MAX), Err(WireError::Aux { .. })),
            "a SEND's aux is 0 or solicited"
        );
    }

    #[test]
    fn oversized_private_data_is_a_protocol_error() {
        let mut h = Header::new(FrameType::ConnectReq);
        h.len = 57;
        assert!(matches!(Header::decode(&h.encode(), MAX), Err(WireError::Length { len: 57, max: 56, .. })));
        let mut h = Header::new(FrameType::Reject);
        h.len = 149;
        assert!(Header::decode(&h.encode(), MAX).is_err());
        let mut h = Header::new(FrameType::Send);
        h.len = 1000;
        assert!(Header::decode(&h.encode(), 999).is_err());
        let mut h = Header::new(FrameType::ReadResp);
        h.status = Status::RemoteAccess;
        h.len = 1;
        assert!(Header::decode(&h.encode(), MAX).is_err());
    }

    #[test]
    fn a_hello_has_exactly_its_length_and_no_aux_and_readiness_carries_valid_parameters() {
        for len in [0, HELLO_LEN as u32 - 1, HELLO_LEN as u32 + 1] {
            let mut h = Header::new(FrameType::Hello);
            h.len = len;
            assert!(matches!(Header::decode(&h.encode(), MAX), Err(WireError::Length { .. })), "hello of {len} bytes");
        }
        let mut h = Header::new(FrameType::Hello);
        h.len = HELLO_LEN as u32;
        assert!(Header::decode(&h.encode(), MAX).is_ok_and(|h| h.is_control()));
        h.aux = 1;
        assert!(matches!(Header::decode(&h.encode(), MAX), Err(WireError::Aux { .. })), "a hello's aux is 0");
        let mut r = Header::new(FrameType::Ready);
        assert!(matches!(Header::decode(&r.encode(), MAX), Err(WireError::Aux { .. })), "readiness without parameters");
        r.aux = CmParams { rnr_retry: 7, initiator_depth: 1, responder_resources: 1 }.to_aux();
        assert!(Header::decode(&r.encode(), MAX).is_ok_and(|h| h.is_control()));
        r.len = 1;
        assert!(matches!(Header::decode(&r.encode(), MAX), Err(WireError::Length { .. })), "readiness has no payload");
    }

    #[test]
    fn cm_parameters_round_trip_and_invalid_ones_are_a_protocol_error() {
        let p = CmParams { rnr_retry: 6, initiator_depth: 3, responder_resources: 128 };
        assert_eq!(CmParams::from_aux(p.to_aux()), Some(p));
        let mut h = Header::new(FrameType::ConnectReq);
        h.aux = p.to_aux();
        assert_eq!(Header::decode(&h.encode(), MAX).map(|h| h.aux), Ok(p.to_aux()));
        let invalid = [
            CmParams { rnr_retry: 8, ..p }.to_aux(),
            CmParams { initiator_depth: 0, ..p }.to_aux(),
            CmParams { responder_resources: 0, ..p }.to_aux(),
            p.to_aux() | 1 << 24,
            7,
        ];
        for aux in invalid {
            assert_eq!(CmParams::from_aux(aux), None, "{aux:#x}");
            for ty in [FrameType::ConnectReq, FrameType::Accept] {
                let mut h = Header::new(ty);
                h.aux = aux;
                assert!(matches!(Header::decode(&h.encode(), MAX), Err(WireError::Aux { .. })), "{ty:?} {aux:#x}");
            }
        }
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        // A deterministic byte generator (xorshift): many random headers, none may panic, and
        // any accepted one must re-encode to the same bytes.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut accepted = 0;
        for _ in 0..200_000 {
            let mut b = [0u8; HEADER_LEN];
            for chunk in b.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
            // Make some of them plausible so the deeper checks run too.
            if x % 2 == 0 {
                b[0] = VERSION;
                b[1] %= 14;
                b[2] %= 6;
                b[3] = 0;
            }
            if let Ok(h) = Header::decode(&b, MAX) {
                accepted += 1;
                assert_eq!(h.encode(), b);
            }
        }
        assert!(accepted > 0, "the generator never produced a valid header");
        let mut b = Header::new(FrameType::Send).encode();
        // Version 1 (before the READ depths) included: its connect parameters mean otherwise.
        for other in [VERSION - 1, VERSION + 1] {
            b[0] = other;
            assert_eq!(Header::decode(&b, MAX), Err(WireError::Version(other)));
        }
        b[0] = VERSION;
        b[1] = 0;
        assert_eq!(Header::decode(&b, MAX), Err(WireError::Type(0)));
        b[1] = FrameType::Send as u8;
        b[2] = 1;
        assert!(matches!(Header::decode(&b, MAX), Err(WireError::Status { .. })));
        b[2] = 0;
        b[3] = 1;
        assert_eq!(Header::decode(&b, MAX), Err(WireError::Reserved(1)));
    }
}
