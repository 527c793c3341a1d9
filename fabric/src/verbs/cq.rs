//! Completion queues with their completion channels.

use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::device::Device;
use super::events::{unwatch_cq, watch_cq};
use super::os::{errno, last_os, poll_fd, set_nonblocking};
use crate::{Error, Result, WcOpcode, WcStatus, WorkCompletion};

/// Completions moved per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;

/// A completion channel (its fd is non-blocking).
struct CompChannel(*mut ibv_comp_channel);

impl CompChannel {
    /// The channel's (non-blocking) descriptor.
    fn fd(&self) -> RawFd {
        // SAFETY: the channel is live while `self` is.
        unsafe { (*self.0).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: the CQ using the channel was destroyed first (Cq's Drop); destroyed once.
        unsafe { ibv_destroy_comp_channel(self.0) };
    }
}

/// A completion queue and its channel.
pub(crate) struct Cq {
    cq: *mut ibv_cq,
    /// The depth the device gave (`cqe` of the created CQ: devices round up).
    depth: u32,
    /// Set by the async event reader when the device reports an overrun of this CQ.
    overrun: Arc<AtomicBool>,
    // Dropped after the CQ (fields drop after `Drop::drop`).
    channel: CompChannel,
    dev: Arc<Device>,
}

// SAFETY: libibverbs CQs and completion channels are thread-safe (providers lock their
// queues); the raw pointers are only used through verbs calls.
unsafe impl Send for Cq {}
// SAFETY: see Send.
unsafe impl Sync for Cq {}

impl Cq {
    /// Creates a CQ of `depth` entries with its own completion channel on `dev`.
    pub(super) fn new(dev: &Arc<Device>, depth: u32) -> Result<Cq> {
        // SAFETY: the context is open while `dev` lives.
        let raw = unsafe { ibv_create_comp_channel(dev.ctx()) };
        if raw.is_null() {
            return Err(last_os("ibv_create_comp_channel"));
        }
        let channel = CompChannel(raw);
        // SAFETY: the channel is live; its fd belongs to it.
        set_nonblocking(unsafe { (*raw).fd }, "ibv_create_comp_channel")?;
        let cqe = depth.min(i32::MAX as u32) as i32;
        // SAFETY: context and channel are live; no CQ context pointer.
        let cq = unsafe { ibv_create_cq(dev.ctx(), cqe, std::ptr::null_mut(), raw, 0) };
        if cq.is_null() {
            return Err(last_os("ibv_create_cq"));
        }
        // SAFETY: the CQ was just created; `cqe` holds the depth the device allocated.
        let depth = unsafe { (*cq).cqe }.max(0) as u32;
        let overrun = watch_cq(cq);
        Ok(Cq { cq, depth, overrun, channel, dev: dev.clone() })
    }

    /// The raw CQ (for queue-pair creation).
    pub(super) fn raw(&self) -> *mut ibv_cq {
        self.cq
    }

    /// The device.
    pub(super) fn dev(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Polls for up to `timeout`: polls, arming and blocking when empty.
    pub(super) fn poll_blocking(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        self.blocking(timeout, || self.poll(out))
    }

    /// As [`Self::poll_blocking`], into raw verbs completions (UD receives need `src_qp`).
    pub(super) fn poll_raw_blocking(&self, out: &mut [ibv_wc], timeout: Duration) -> Result<usize> {
        self.blocking(timeout, || self.poll_raw(out))
    }

    fn blocking(&self, timeout: Duration, mut poll: impl FnMut() -> Result<usize>) -> Result<usize> {
        let deadline = crate::time::deadline_after(timeout);
        loop {
            let n = poll()?;
            if n > 0 {
                return Ok(n);
            }
            self.arm()?;
            let n = poll()?;
            if n > 0 {
                return Ok(n);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(0);
            }
            self.wait(deadline - now)?;
        }
    }

    /// Moves up to `out.len()` raw completions into `out` (one `ibv_poll_cq`).
    fn poll_raw(&self, out: &mut [ibv_wc]) -> Result<usize> {
        if self.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun { depth: self.depth });
        }
        let want = out.len().min(i32::MAX as usize) as i32;
        // SAFETY: the CQ is live; `out` has room for `want` entries.
        let n = unsafe { ibv_poll_cq(self.cq, want, out.as_mut_ptr()) };
        if n < 0 {
            return Err(errno("ibv_poll_cq", if n == -1 { libc::EIO } else { n }));
        }
        Ok(n as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        unwatch_cq(self.cq);
        // SAFETY: queue pairs using the CQ hold an Arc of it, so none is left; every event was
        // acknowledged when taken (`take_notification`). Destroyed once; the channel is destroyed after (field drop).
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

impl Cq {
    /// Moves up to `out.len()` completions into `out`; returns how many.
    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // After an overrun the device's CQ contents are undefined: the error is sticky.
        if self.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun { depth: self.depth });
        }
        let mut done = 0;
        while done < out.len() {
            // SAFETY: ibv_wc is plain old data; zero is a valid value.
            let mut wcs: [ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
            let want = (out.len() - done).min(POLL_BATCH);
            // SAFETY: the CQ is live; `wcs` has room for `want` entries.
            let n = unsafe { ibv_poll_cq(self.cq, want as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(errno("ibv_poll_cq", if n == -1 { libc::EIO } else { n }));
            }
            for (slot, wc) in out[done..].iter_mut().zip(&wcs[..n as usize]) {
                *slot = convert(wc);
            }
            done += n as usize;
            if (n as usize) < want {
                break;
            }
        }
        Ok(done)
    }

    /// Requests a notification for the next completion (`ibv_req_notify_cq`).
    pub(crate) fn arm(&self) -> Result<()> {
        // SAFETY: the CQ is live.
        let rc = unsafe { ibv_req_notify_cq(self.cq, 0) };
        if rc != 0 {
            return Err(errno("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    /// Requests a notification for the next receive completion of a SEND posted with
    /// `solicited`, or the next failed completion (`ibv_req_notify_cq` with `solicited_only`).
    /// Other completions are queued without one. Arming for every completion overrides it.
    pub(crate) fn arm_solicited(&self) -> Result<()> {
        // SAFETY: the CQ is live.
        let rc = unsafe { ibv_req_notify_cq(self.cq, 1) };
        if rc != 0 {
            return Err(errno("ibv_req_notify_cq (solicited only)", rc));
        }
        Ok(())
    }

    /// Waits up to `timeout` for a notification requested by `arm` and acknowledges it.
    /// Returns whether one arrived.
    pub(crate) fn wait(&self, timeout: Duration) -> Result<bool> {
        let deadline = crate::time::deadline_after(timeout);
        loop {
            if self.take_notification()? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            poll_fd(self.channel.fd(), deadline - now, "poll completion channel")?;
        }
    }

    /// A descriptor that polls readable once a notification requested by `arm` or
    /// `arm_solicited` has arrived and is not taken yet (verbs: the completion channel's fd).
    pub(crate) fn notify_fd(&self) -> Result<BorrowedFd<'_>> {
        // SAFETY: the channel's fd is open while the channel lives, which is as long as `self`.
        Ok(unsafe { BorrowedFd::borrow_raw(self.channel.fd()) })
    }

    /// Takes (and acknowledges) a notification without blocking, so that `notify_fd` polls
    /// readable only for the next one. Returns whether one had arrived.
    pub(crate) fn take_notification(&self) -> Result<bool> {
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; out-pointers are valid.
        if unsafe { ibv_get_cq_event(self.channel.0, &mut cq, &mut ctx) } == 0 {
            // SAFETY: `cq` is the CQ the event is for (ours: the channel is ours alone).
            unsafe { ibv_ack_cq_events(cq, 1) };
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(false);
        }
        Err(Error::os("ibv_get_cq_event", None, err))
    }

    /// The depth.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }
}

/// Maps a verbs completion (for errors only wr_id, status and qp_num are defined).
pub(super) fn convert(wc: &ibv_wc) -> WorkCompletion {
    use ibv_wc_opcode::*;
    let status = map_status(wc.status);
    let opcode = match wc.opcode {
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_RECV | IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::Recv,
        _ => WcOpcode::Send,
    };
    let with_imm = status.is_success() && wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
    // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate data.
    let imm = with_imm.then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }));
    WorkCompletion {
        wr_id: wc.wr_id,
        status,
        opcode,
        byte_len: if status.is_success() { wc.byte_len } else { 0 },
        imm,
        qp_num: wc.qp_num,
    }
}

/// Maps `ibv_wc_status`.
pub(super) fn map_status(status: ibv_wc_status::Type) -> WcStatus {
    use ibv_wc_status::*;
    match status {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtectionError,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        IBV_WC_REM_OP_ERR => WcStatus::RemoteOperationError,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        IBV_WC_RETRY_EXC_ERR => WcStatus::TransportRetryExceeded,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WorkRequestFlushed,
        other => WcStatus::Other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_fabric_names() {
        use ibv_wc_status::*;
        assert_eq!(map_status(IBV_WC_SUCCESS), WcStatus::Success);
        assert_eq!(map_status(IBV_WC_REM_ACCESS_ERR), WcStatus::RemoteAccessError);
        assert_eq!(map_status(IBV_WC_RNR_RETRY_EXC_ERR), WcStatus::RnrRetryExceeded);
        assert_eq!(map_status(IBV_WC_RETRY_EXC_ERR), WcStatus::TransportRetryExceeded);
        assert_eq!(map_status(IBV_WC_WR_FLUSH_ERR), WcStatus::WorkRequestFlushed);
        assert_eq!(map_status(IBV_WC_LOC_LEN_ERR), WcStatus::LocalLengthError);
        assert_eq!(map_status(IBV_WC_LOC_PROT_ERR), WcStatus::LocalProtectionError);
        assert_eq!(map_status(IBV_WC_REM_INV_REQ_ERR), WcStatus::RemoteInvalidRequest);
        assert_eq!(map_status(IBV_WC_REM_OP_ERR), WcStatus::RemoteOperationError);
        assert_eq!(map_status(IBV_WC_MW_BIND_ERR), WcStatus::Other(IBV_WC_MW_BIND_ERR));
    }

    #[test]
    fn completions_convert_with_immediate_data_only_on_success() {
        // SAFETY: ibv_wc is plain old data.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        wc.wr_id = 9;
        wc.opcode = ibv_wc_opcode::IBV_WC_RECV;
        wc.byte_len = 12;
        wc.qp_num = 77;
        wc.wc_flags = ibv_wc_flags::IBV_WC_WITH_IMM.0;
        wc.imm_data_invalidated_rkey_union.imm_data = 0xdead_beefu32.to_be();
        let c = convert(&wc);
        assert_eq!((c.wr_id, c.opcode, c.byte_len, c.imm, c.qp_num), (9, WcOpcode::Recv, 12, Some(0xdead_beef), 77));
        wc.status = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
        let c = convert(&wc);
        assert_eq!((c.status, c.byte_len, c.imm), (WcStatus::WorkRequestFlushed, 0, None));
    }
}
