//! What posting to any queue shares: scatter/gather entries in the verbs form, and the return
//! code of a post as an error.

use rdma_sys::*;

use super::os::errno;
use crate::provider::Sge;
use crate::{Error, Result};

/// SGEs converted on the stack; more go through a heap vector.
const INLINE_SGES: usize = 8;

/// Calls `f` with the verbs form of `sges` (address = region address + offset, lkey).
pub(super) fn with_sges(sges: &[Sge<'_>], f: impl FnOnce(*mut ibv_sge, i32) -> i32) -> Result<i32> {
    let convert = |s: &Sge<'_>| -> Result<ibv_sge> {
        let length = u32::try_from(s.len)
            .map_err(|_| Error::invalid("post", format!("SGE of {} bytes exceeds 4 GiB", s.len)))?;
        Ok(ibv_sge { addr: s.mr.addr() + s.offset as u64, length, lkey: s.mr.lkey() })
    };
    if sges.len() <= INLINE_SGES {
        let mut arr = [ibv_sge { addr: 0, length: 0, lkey: 0 }; INLINE_SGES];
        for (dst, src) in arr.iter_mut().zip(sges) {
            *dst = convert(src)?;
        }
        let ptr = if sges.is_empty() { std::ptr::null_mut() } else { arr.as_mut_ptr() };
        Ok(f(ptr, sges.len() as i32))
    } else {
        let mut v = sges.iter().map(convert).collect::<Result<Vec<_>>>()?;
        Ok(f(v.as_mut_ptr(), v.len().min(i32::MAX as usize) as i32))
    }
}

/// Maps the return code of a post: ENOMEM means the queue is full.
pub(super) fn post_error(rc: Result<i32>, verb: &'static str, queue: &'static str, depth: u32) -> Result<()> {
    match rc? {
        0 => Ok(()),
        libc::ENOMEM => Err(Error::QueueFull { queue, depth }),
        other => Err(errno(verb, other)),
    }
}
