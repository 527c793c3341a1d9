//! A provider under test: how to open it, where it listens, and the few facts a generic test
//! must know about it because the contract leaves them to the provider.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rdma_fabric::{self as fabric, DataPath, Fabric, FabricConfig, FabricKind, SameHost, SoftOptions};

/// The environment variable naming the address of the Soft-RoCE interface in the verbs VM.
pub const RXE_IP_ENV: &str = "RXE_IP";
/// The address used when `RXE_IP` is unset (QEMU user networking).
pub const RXE_IP_DEFAULT: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);

/// Description of one provider as the generic suites see it.
#[derive(Debug, Clone)]
pub struct ProviderSpec {
    /// The name of the test module instantiating the suite (`soft`, `verbs`): test paths are
    /// `<name>::<case>`.
    pub name: &'static str,
    /// The provider to open.
    pub kind: FabricKind,
    /// The local address to bind, listen on, and send multicast from.
    pub local_ip: Ipv4Addr,
    /// Whether CM private data arrives with exactly the length sent. librdmacm delivers the whole
    /// fixed-size field of the CM message (56 bytes for a connect request, 196 for an accept,
    /// 148 for a reject), zero padded, so verbs only guarantees a prefix match.
    pub exact_private_data: bool,
    /// Whether a queue holds exactly the requested number of work requests. Verbs devices may
    /// round queue depths up (Soft-RoCE rounds to a power of two minus one).
    pub exact_queue_depth: bool,
    /// Connect/disconnect cycles of the leak test, warm-up included.
    pub leak_cycles: usize,
    /// Cycles run before the resource baseline is taken.
    pub leak_warmup: usize,
    /// Time limit of a test run in a child process.
    pub child_timeout: Duration,
    /// Longest a request to a peer that vanished (its process killed) may take to fail: soft
    /// sees the TCP connection end at once; an RDMA device retries first (retry count and
    /// timeout of the queue pair).
    pub dead_peer_timeout: Duration,
    /// The soft provider's same-host setting.
    pub same_host: SameHost,
    /// How READs and WRITEs between two devices of this test process travel.
    pub data_path: DataPath,
}

impl ProviderSpec {
    /// The soft provider on loopback, its same-host path on (both ends are in this process).
    pub fn soft() -> Self {
        ProviderSpec {
            name: "soft",
            kind: FabricKind::Soft,
            local_ip: Ipv4Addr::LOCALHOST,
            exact_private_data: true,
            exact_queue_depth: true,
            leak_cycles: 1000,
            leak_warmup: 50,
            child_timeout: Duration::from_secs(120),
            dead_peer_timeout: Duration::from_secs(10),
            same_host: SameHost::Auto,
            data_path: DataPath::SharedMemory,
        }
    }

    /// The soft provider on loopback with its same-host path off: everything through the NIC
    /// threads and TCP.
    pub fn soft_network() -> Self {
        ProviderSpec { name: "soft_network", same_host: SameHost::Off, data_path: DataPath::Network, ..Self::soft() }
    }

    /// The verbs provider on the Soft-RoCE device behind `RXE_IP` (default 10.0.2.15).
    pub fn verbs() -> Self {
        let local_ip = match std::env::var(RXE_IP_ENV) {
            Ok(s) => s.parse().unwrap_or_else(|e| panic!("{RXE_IP_ENV}={s:?} is not an IPv4 address: {e}")),
            Err(_) => RXE_IP_DEFAULT,
        };
        ProviderSpec {
            name: "verbs",
            kind: FabricKind::Verbs,
            local_ip,
            exact_private_data: false,
            exact_queue_depth: false,
            leak_cycles: 100,
            leak_warmup: 20,
            child_timeout: Duration::from_secs(600),
            dead_peer_timeout: Duration::from_secs(90),
            same_host: SameHost::Auto,
            data_path: DataPath::Network,
        }
    }

    /// The configuration that opens this provider.
    pub fn config(&self) -> FabricConfig {
        FabricConfig {
            kind: self.kind,
            bind: IpAddr::V4(self.local_ip),
            soft: SoftOptions::default().same_host(self.same_host),
            ..FabricConfig::default()
        }
    }

    /// Opens a device of this provider, panicking with the reason when it cannot.
    pub fn open(&self) -> Fabric {
        fabric::open(&self.config())
            .unwrap_or_else(|e| panic!("opening the {} fabric on {}: {e}", self.kind, self.local_ip))
    }

    /// The address to listen on with a port picked by the system.
    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.local_ip), 0)
    }

    /// A multicast group, port and payload tag of one test: distinct per test name and per
    /// process, so that tests running in parallel (and other test processes) do not hear
    /// each other.
    pub fn multicast(&self, case: &str) -> McastSlot {
        let mut h = DefaultHasher::new();
        (self.name, case, std::process::id()).hash(&mut h);
        let x = h.finish();
        let b = x.to_le_bytes();
        McastSlot {
            // 239.192.0.0/14: organisation-local scope.
            group: Ipv4Addr::new(239, 192 + (b[0] & 3), b[1], b[2].max(1)),
            // Below the Linux ephemeral range (32768..), above the well-known services.
            port: 20000 + (u16::from_le_bytes([b[3], b[4]]) % 12000),
            tag: x,
        }
    }
}

/// A multicast group, port and payload tag reserved for one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McastSlot {
    /// The group address.
    pub group: Ipv4Addr,
    /// The UD port (soft: UDP port; verbs: folded into the Q_Key).
    pub port: u16,
    /// The first 8 bytes of every payload of this test; receivers ignore other datagrams.
    pub tag: u64,
}

impl McastSlot {
    /// A second group of this test (same port), distinct from `group`.
    pub fn second_group(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.group.octets();
        Ipv4Addr::new(a, b, c ^ 0x80, d)
    }

    /// A payload of `len` bytes (at least 16): the tag, `seq`, then a pattern derived from both.
    pub fn payload(&self, seq: u64, len: usize) -> Vec<u8> {
        assert!(len >= 16, "a tagged payload needs 16 bytes");
        let mut p = Vec::with_capacity(len);
        p.extend_from_slice(&self.tag.to_le_bytes());
        p.extend_from_slice(&seq.to_le_bytes());
        p.extend((16..len).map(|i| (i as u64).wrapping_mul(131).wrapping_add(seq) as u8));
        p
    }

    /// The sequence number of a payload of this test, `None` for anybody else's datagram.
    pub fn seq_of(&self, payload: &[u8]) -> Option<u64> {
        if payload.len() < 16 || payload[..8] != self.tag.to_le_bytes() {
            return None;
        }
        Some(u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes")))
    }
}
