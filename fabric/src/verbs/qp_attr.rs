//! What `ibv_modify_qp` is given for each move of a queue pair connected by hand: the
//! attributes and masks of the RDMA Aware Networks Programming manual's RC example
//! (`modify_qp_to_init`, `modify_qp_to_rtr`, `modify_qp_to_rts`), and the verbs encodings they
//! use (RNR timer codes, MTUs, states, remote access flags). Plain data: no verbs call here.

use std::time::Duration;

use rdma_sys::*;

use crate::{Access, InitAttr, PathMtu, QpState, QpTransition, RtrAttr, RtsAttr};

/// Hop limit of the global route header (on RoCE v2 the IP TTL): as the kernel's CM uses.
pub(super) const HOP_LIMIT: u8 = 64;

/// The partition key index every queue pair uses (the default partition).
const PKEY_INDEX: u16 = 0;

/// This end's part of the path: its port, the index of its source GID and the first PSN it
/// sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LocalPath {
    /// The device port (from 1).
    pub(super) port: u8,
    /// The index of the source GID in the port's table.
    pub(super) gid_index: u8,
    /// The first packet sequence number this end sends (24 bits).
    pub(super) psn: u32,
}

/// The attributes and the mask of one `ibv_modify_qp` call.
pub(super) struct ModifyAttr {
    /// The attributes (only the masked ones are read).
    pub(super) attr: ibv_qp_attr,
    /// Which attributes are set.
    pub(super) mask: ibv_qp_attr_mask,
}

/// What `ibv_modify_qp` is given to make `transition` on a queue pair of `local`.
pub(super) fn modify_attr(transition: &QpTransition, local: &LocalPath) -> ModifyAttr {
    use ibv_qp_attr_mask as m;
    // SAFETY: ibv_qp_attr is plain old data (integers and unions of integers); zero is valid.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = ibv_state_of(transition.target());
    let mask = match transition {
        QpTransition::Init(a) => {
            init_attr(&mut attr, a);
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS
        }
        QpTransition::ReadyToReceive(a) => {
            rtr_attr(&mut attr, a, local);
            m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER
        }
        QpTransition::ReadyToSend(a) => {
            rts_attr(&mut attr, a, local);
            m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC
        }
        QpTransition::Error => m::IBV_QP_STATE,
    };
    ModifyAttr { attr, mask }
}

/// RESET → INIT: the port, the default partition, the remote access allowed.
fn init_attr(attr: &mut ibv_qp_attr, a: &InitAttr) {
    attr.pkey_index = PKEY_INDEX;
    attr.port_num = a.port;
    attr.qp_access_flags = qp_access_flags(a.access);
}

/// INIT → RTR: the peer's queue pair and first PSN, and a global address vector to its GID
/// from this end's source GID (RoCE routes by GID; the LID is 0 there and used on InfiniBand).
fn rtr_attr(attr: &mut ibv_qp_attr, a: &RtrAttr, local: &LocalPath) {
    attr.path_mtu = ibv_mtu_of(a.path_mtu);
    attr.dest_qp_num = a.remote.qp_num;
    attr.rq_psn = a.remote.psn;
    attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr.min_rnr_timer = rnr_timer_code(a.min_rnr_timer);
    attr.ah_attr.is_global = 1;
    attr.ah_attr.dlid = a.remote.lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = local.port;
    attr.ah_attr.grh.dgid = ibv_gid { raw: a.remote.gid };
    attr.ah_attr.grh.flow_label = 0;
    attr.ah_attr.grh.hop_limit = HOP_LIMIT;
    attr.ah_attr.grh.sgid_index = local.gid_index;
    attr.ah_attr.grh.traffic_class = 0;
}

/// RTR → RTS: the retransmission timer and counts, this end's first PSN, the READ depth.
fn rts_attr(attr: &mut ibv_qp_attr, a: &RtsAttr, local: &LocalPath) {
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_count;
    attr.rnr_retry = a.rnr_retry;
    attr.sq_psn = local.psn;
    attr.max_rd_atomic = a.max_rd_atomic;
}

/// The remote access flags of a queue pair (`qp_access_flags`): READ and WRITE rights only.
fn qp_access_flags(access: Access) -> u32 {
    access.bits() & (ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0)
}

/// The verbs state of a [`QpState`].
fn ibv_state_of(state: QpState) -> ibv_qp_state::Type {
    match state {
        QpState::Reset => ibv_qp_state::IBV_QPS_RESET,
        QpState::Init => ibv_qp_state::IBV_QPS_INIT,
        QpState::ReadyToReceive => ibv_qp_state::IBV_QPS_RTR,
        QpState::ReadyToSend => ibv_qp_state::IBV_QPS_RTS,
        QpState::Error => ibv_qp_state::IBV_QPS_ERR,
    }
}

/// The [`QpState`] of a verbs state. A draining send queue (SQD) still sends what it has and
/// counts as RTS; a send queue error (SQE, not reached by RC) and an unknown state as ERROR.
pub(super) fn qp_state_of(state: ibv_qp_state::Type) -> QpState {
    match state {
        ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
        ibv_qp_state::IBV_QPS_INIT => QpState::Init,
        ibv_qp_state::IBV_QPS_RTR => QpState::ReadyToReceive,
        ibv_qp_state::IBV_QPS_RTS | ibv_qp_state::IBV_QPS_SQD => QpState::ReadyToSend,
        _ => QpState::Error,
    }
}

/// The `ibv_mtu` of a [`PathMtu`].
pub(super) fn ibv_mtu_of(mtu: PathMtu) -> ibv_mtu::Type {
    match mtu {
        PathMtu::Mtu256 => ibv_mtu::IBV_MTU_256,
        PathMtu::Mtu512 => ibv_mtu::IBV_MTU_512,
        PathMtu::Mtu1024 => ibv_mtu::IBV_MTU_1024,
        PathMtu::Mtu2048 => ibv_mtu::IBV_MTU_2048,
        PathMtu::Mtu4096 => ibv_mtu::IBV_MTU_4096,
    }
}

/// The [`PathMtu`] of an `ibv_mtu` a port reports; `None` for a value verbs does not define.
pub(super) fn path_mtu_of(mtu: ibv_mtu::Type) -> Option<PathMtu> {
    Some(match mtu {
        ibv_mtu::IBV_MTU_256 => PathMtu::Mtu256,
        ibv_mtu::IBV_MTU_512 => PathMtu::Mtu512,
        ibv_mtu::IBV_MTU_1024 => PathMtu::Mtu1024,
        ibv_mtu::IBV_MTU_2048 => PathMtu::Mtu2048,
        ibv_mtu::IBV_MTU_4096 => PathMtu::Mtu4096,
        _ => return None,
    })
}

/// The IB encoding of an RNR NAK timer: the smallest code whose delay is at least `d`.
pub(super) fn rnr_timer_code(d: Duration) -> u8 {
    // Delays in microseconds of codes 1..=31 (code 0 means 655.36 ms, the largest).
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
        10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    let us = d.as_micros();
    (1..32u8).find(|&c| u128::from(US[usize::from(c)]) >= us).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QpEndpoint;
    use ibv_qp_attr_mask as m;

    const LOCAL: LocalPath = LocalPath { port: 1, gid_index: 3, psn: 0x12_3456 };

    fn remote() -> QpEndpoint {
        let mut gid = [0u8; 16];
        gid[10..12].copy_from_slice(&[0xff, 0xff]);
        gid[12..].copy_from_slice(&[10, 0, 2, 15]);
        QpEndpoint { qp_num: 0x11, psn: 0xab_cdef, port: 1, lid: 0, gid, mtu: PathMtu::Mtu1024 }
    }

    #[test]
    fn rnr_timer_codes_round_up() {
        assert_eq!(rnr_timer_code(Duration::from_micros(10)), 1);
        assert_eq!(rnr_timer_code(Duration::from_micros(11)), 2);
        assert_eq!(rnr_timer_code(Duration::from_micros(640)), 12);
        assert_eq!(rnr_timer_code(Duration::ZERO), 1);
        assert_eq!(rnr_timer_code(Duration::from_micros(491_520)), 31);
        assert_eq!(rnr_timer_code(Duration::from_millis(600)), 0);
        assert_eq!(rnr_timer_code(Duration::from_secs(5)), 0);
    }

    #[test]
    fn init_sets_the_port_the_default_partition_and_remote_rights_only() {
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let t = modify_attr(&QpTransition::Init(InitAttr { port: 2, access }), &LOCAL);
        assert_eq!(t.mask.0, (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0);
        assert_eq!((t.attr.qp_state, t.attr.port_num, t.attr.pkey_index), (ibv_qp_state::IBV_QPS_INIT, 2, 0));
        let rw = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        assert_eq!(t.attr.qp_access_flags, rw);
        let read_only = modify_attr(&QpTransition::Init(InitAttr { port: 1, access: Access::REMOTE_READ }), &LOCAL);
        assert_eq!(read_only.attr.qp_access_flags, ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    }

    #[test]
    fn rtr_sets_a_global_address_vector_to_the_peers_gid_and_its_psn() {
        let a = RtrAttr {
            remote: remote(),
            path_mtu: PathMtu::Mtu512,
            max_dest_rd_atomic: 4,
            min_rnr_timer: Duration::from_micros(640),
        };
        let t = modify_attr(&QpTransition::ReadyToReceive(a), &LOCAL);
        let want = m::IBV_QP_STATE
            | m::IBV_QP_AV
            | m::IBV_QP_PATH_MTU
            | m::IBV_QP_DEST_QPN
            | m::IBV_QP_RQ_PSN
            | m::IBV_QP_MAX_DEST_RD_ATOMIC
            | m::IBV_QP_MIN_RNR_TIMER;
        assert_eq!(t.mask.0, want.0);
        let at = &t.attr;
        assert_eq!(at.qp_state, ibv_qp_state::IBV_QPS_RTR);
        assert_eq!((at.path_mtu, at.dest_qp_num, at.rq_psn), (ibv_mtu::IBV_MTU_512, 0x11, 0xab_cdef));
        assert_eq!((at.max_dest_rd_atomic, at.min_rnr_timer), (4, 12));
        let ah = &at.ah_attr;
        assert_eq!((ah.is_global, ah.port_num, ah.dlid, ah.sl), (1, 1, 0, 0));
        // SAFETY: the raw view of a GID is always valid.
        assert_eq!(unsafe { ah.grh.dgid.raw }, remote().gid);
        assert_eq!((ah.grh.sgid_index, ah.grh.hop_limit), (3, HOP_LIMIT));
        assert!((1..=64).contains(&ah.grh.hop_limit));
    }

    #[test]
    fn rts_sets_the_timers_retries_read_depth_and_this_ends_psn() {
        let a = RtsAttr { timeout: 14, retry_count: 7, rnr_retry: 6, max_rd_atomic: 8 };
        let t = modify_attr(&QpTransition::ReadyToSend(a), &LOCAL);
        let want = m::IBV_QP_STATE
            | m::IBV_QP_TIMEOUT
            | m::IBV_QP_RETRY_CNT
            | m::IBV_QP_RNR_RETRY
            | m::IBV_QP_SQ_PSN
            | m::IBV_QP_MAX_QP_RD_ATOMIC;
        assert_eq!(t.mask.0, want.0);
        let at = &t.attr;
        assert_eq!(at.qp_state, ibv_qp_state::IBV_QPS_RTS);
        assert_eq!((at.timeout, at.retry_cnt, at.rnr_retry, at.max_rd_atomic), (14, 7, 6, 8));
        assert_eq!(at.sq_psn, LOCAL.psn);
    }

    #[test]
    fn error_sets_the_state_only() {
        let t = modify_attr(&QpTransition::Error, &LOCAL);
        assert_eq!(t.mask.0, m::IBV_QP_STATE.0);
        assert_eq!(t.attr.qp_state, ibv_qp_state::IBV_QPS_ERR);
    }

    #[test]
    fn mtus_and_states_map_both_ways() {
        for mtu in [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096] {
            assert_eq!(path_mtu_of(ibv_mtu_of(mtu)), Some(mtu));
        }
        assert_eq!(path_mtu_of(0), None);
        assert_eq!(path_mtu_of(6), None);
        for s in [QpState::Reset, QpState::Init, QpState::ReadyToReceive, QpState::ReadyToSend, QpState::Error] {
            assert_eq!(qp_state_of(ibv_state_of(s)), s);
        }
        assert_eq!(qp_state_of(ibv_qp_state::IBV_QPS_SQD), QpState::ReadyToSend);
        assert_eq!(qp_state_of(ibv_qp_state::IBV_QPS_SQE), QpState::Error);
        assert_eq!(qp_state_of(ibv_qp_state::IBV_QPS_UNKNOWN), QpState::Error);
    }
}
