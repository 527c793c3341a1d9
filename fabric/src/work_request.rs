//! A send-queue work request ([`SendRequest`]): what a queue pair posts to SEND, READ or WRITE.

use super::region::Sge;
use super::types::SendOp;

/// A send-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local memory: gathered for SEND/WRITE, scattered into for READ.
    pub sges: &'a [Sge<'a>],
    /// Whether a successful completion is generated (errors always are).
    pub signaled: bool,
    /// SEND only: the receiver's completion raises a notification on a CQ armed with
    /// [`CompletionQueue::arm_solicited`](crate::CompletionQueue::arm_solicited)
    /// (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

impl<'a> SendRequest<'a> {
    /// A signaled, unsolicited request.
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge<'a>]) -> Self {
        SendRequest { wr_id, op, sges, signaled: true, solicited: false }
    }

    /// The same request without a completion when it succeeds.
    pub fn unsignaled(self) -> Self {
        SendRequest { signaled: false, ..self }
    }

    /// The same request, solicited (SEND only: see [`SendRequest::solicited`](Self#structfield.solicited)).
    pub fn solicited(self) -> Self {
        SendRequest { solicited: true, ..self }
    }
}
