//! The source GID of a queue pair connected by hand, chosen as Soft-RoCE (rxe) needs it: on
//! RoCE a port's GID table holds each address of its netdev twice (RoCE v1 and RoCE v2) next
//! to the link-local ones, and the connection manager picks the RoCE v2 entry of the address
//! it resolved. A queue pair connected by hand picks it the same way: the entry whose type is
//! RoCE v2 and whose GID is the IPv4-mapped address of the device's netdev (the address the
//! device was opened by, when known). rdma-sys 0.3 has no `ibv_query_gid_type`: the types are
//! read where the kernel shows them, `/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>`.

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

/// Where the kernel shows the RDMA devices.
pub(super) const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// The type of a GID table entry, as the kernel names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GidType {
    /// `IB/RoCE v1`: InfiniBand, or RoCE over Ethernet frames (not routable).
    IbOrRoceV1,
    /// `RoCE v2`: RoCE over UDP/IP, the type rxe sends.
    RoceV2,
}

impl GidType {
    /// Parses the kernel's name of a type; `None` for another.
    fn parse(text: &str) -> Option<GidType> {
        match text.trim() {
            "IB/RoCE v1" => Some(GidType::IbOrRoceV1),
            "RoCE v2" => Some(GidType::RoceV2),
            _ => None,
        }
    }
}

/// One populated entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GidEntry {
    /// Its index in the table.
    pub(super) index: u8,
    /// Its type.
    pub(super) gid_type: GidType,
    /// The GID.
    pub(super) gid: [u8; 16],
}

/// The GID RoCE gives an IP address: the IPv4-mapped IPv6 address for IPv4.
pub(super) fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address of a RoCE GID: IPv4 for an IPv4-mapped one.
pub(super) fn ip_of(gid: [u8; 16]) -> IpAddr {
    Ipv6Addr::from(gid).to_canonical()
}

/// The entry a queue pair connected by hand sends from: the first RoCE v2 entry whose GID is
/// `want` (the address the device was opened by), or, without one, the first RoCE v2 entry
/// holding an IPv4-mapped address (the netdev's IPv4 address: the table holds only its
/// netdev's addresses). Reads the table `entries` yields, in index order, only as far as needed.
pub(super) fn choose_roce_v2(entries: impl IntoIterator<Item = GidEntry>, want: Option<IpAddr>) -> Option<GidEntry> {
    let fits = |e: &GidEntry| match want {
        Some(ip) => e.gid == gid_of(ip),
        None => Ipv6Addr::from(e.gid).to_ipv4_mapped().is_some(),
    };
    entries.into_iter().find(|e| e.gid_type == GidType::RoceV2 && fits(e))
}

/// The populated entries of port `port` of device `dev` under `root` (the sysfs class
/// directory), indexes `0..len` in order (at most 256: an address vector names its source GID
/// by a `u8`), read lazily. An entry whose type or GID cannot be read (the kernel refuses to
/// show an empty one) or whose GID is zero is skipped.
pub(super) fn sysfs_table(root: &Path, dev: &str, port: u8, len: usize) -> impl Iterator<Item = GidEntry> {
    let port_dir = root.join(dev).join("ports").join(port.to_string());
    (0..=u8::MAX).take(len).filter_map(move |index| {
        let read = |sub: &str| std::fs::read_to_string(port_dir.join(sub).join(index.to_string())).ok();
        let gid: Ipv6Addr = read("gids")?.trim().parse().ok()?;
        if gid.is_unspecified() {
            return None;
        }
        let gid_type = GidType::parse(&read("gid_attrs/types")?)?;
        Some(GidEntry { index, gid_type, gid: gid.octets() })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::path::PathBuf;

    /// The table rxe shows for a netdev with 10.0.2.15 and an IPv6 link-local address: the
    /// link-local GID as v1 and v2, then the IPv4 address as v1 and v2; index 4 empty.
    const RXE_TABLE: [(&str, &str); 5] = [
        ("fe80:0000:0000:0000:5054:00ff:fe12:3456", "IB/RoCE v1"),
        ("fe80:0000:0000:0000:5054:00ff:fe12:3456", "RoCE v2"),
        ("0000:0000:0000:0000:0000:ffff:0a00:020f", "IB/RoCE v1"),
        ("0000:0000:0000:0000:0000:ffff:0a00:020f", "RoCE v2"),
        ("0000:0000:0000:0000:0000:0000:0000:0000", ""),
    ];

    /// A sysfs class directory holding one device `rxe0` whose port 1 shows `table`; an empty
    /// type is a file that is missing (as the kernel refuses to show it).
    struct FakeSysfs(PathBuf);

    impl FakeSysfs {
        fn new(name: &str, table: &[(&str, &str)]) -> FakeSysfs {
            let root = std::env::temp_dir().join(format!("rdma-pubsub-gid-{name}-{}", std::process::id()));
            let port = root.join("rxe0/ports/1");
            std::fs::create_dir_all(port.join("gids")).unwrap();
            std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
            for (i, (gid, ty)) in table.iter().enumerate() {
                std::fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
                if !ty.is_empty() {
                    std::fs::write(port.join("gid_attrs/types").join(i.to_string()), format!("{ty}\n")).unwrap();
                }
            }
            FakeSysfs(root)
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    #[test]
    fn the_roce_v2_entry_of_the_devices_ipv4_address_is_chosen() {
        let sysfs = FakeSysfs::new("rxe", &RXE_TABLE);
        let table = || sysfs_table(&sysfs.0, "rxe0", 1, 5);
        let want = Some(IpAddr::from([10, 0, 2, 15]));
        let chosen = choose_roce_v2(table(), want).expect("an entry");
        assert_eq!(chosen, GidEntry { index: 3, gid_type: GidType::RoceV2, gid: mapped([10, 0, 2, 15]) });
        // Without the address, the first RoCE v2 entry with an IPv4 address: not the link-local one.
        assert_eq!(choose_roce_v2(table(), None).map(|e| e.index), Some(3));
        // Another address has no entry.
        assert_eq!(choose_roce_v2(table(), Some(IpAddr::from([10, 0, 2, 16]))), None);
        // The empty entry is not read as one.
        assert_eq!(table().count(), 4);
    }

    #[test]
    fn a_table_without_roce_v2_entries_has_no_choice() {
        let v1_only: Vec<_> =
            RXE_TABLE.iter().map(|&(g, t)| (g, if t.is_empty() { t } else { "IB/RoCE v1" })).collect();
        let sysfs = FakeSysfs::new("v1", &v1_only);
        assert_eq!(choose_roce_v2(sysfs_table(&sysfs.0, "rxe0", 1, 5), None), None);
        assert_eq!(choose_roce_v2(sysfs_table(&sysfs.0, "rxe0", 1, 5), Some(IpAddr::from([10, 0, 2, 15]))), None);
    }

    #[test]
    fn an_ipv6_address_is_matched_as_is_and_unreadable_entries_are_skipped() {
        let table = [
            ("garbage", "RoCE v2"),
            ("fd00:0000:0000:0000:0000:0000:0000:0001", "something else"),
            ("fd00:0000:0000:0000:0000:0000:0000:0001", "RoCE v2"),
        ];
        let sysfs = FakeSysfs::new("v6", &table);
        let want: IpAddr = "fd00::1".parse().unwrap();
        let chosen = choose_roce_v2(sysfs_table(&sysfs.0, "rxe0", 1, 3), Some(want)).expect("an entry");
        assert_eq!((chosen.index, ip_of(chosen.gid)), (2, want));
        // Indexes beyond what the port has are not read; a missing device has no table.
        assert_eq!(sysfs_table(&sysfs.0, "rxe0", 1, 2).count(), 0);
        assert_eq!(sysfs_table(&sysfs.0, "nodev", 1, 3).count(), 0);
    }

    #[test]
    fn gids_and_addresses_convert_both_ways() {
        let v4 = IpAddr::from([192, 168, 1, 2]);
        assert_eq!(gid_of(v4), mapped([192, 168, 1, 2]));
        assert_eq!(ip_of(gid_of(v4)), v4);
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(ip_of(gid_of(v6)), v6);
    }
}
