//! Tests of the format, the directory and the writer.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::directory::own_uid;
use super::*;

fn sample() -> Snapshot {
    Snapshot {
        pid: 42,
        node_id: 0x9f1c_2a0b_33d4_e5f6,
        addr: "127.0.0.1:4000".into(),
        fabric: "soft".into(),
        epoch_us: 1,
        updated_us: 2,
        sections: vec![
            Section { kind: Kind::Node, topic: None, values: vec![("rejected_connects".into(), 3)] },
            Section {
                kind: Kind::Publisher,
                topic: Some("a topic with spaces=and equals".into()),
                values: vec![("published".into(), 10), ("bytes".into(), 640), ("lag_bytes".into(), 64)],
            },
            Section {
                kind: Kind::Subscription,
                topic: Some("a topic with spaces=and equals".into()),
                values: vec![("delivered".into(), 9), ("lost".into(), 1)],
            },
        ],
    }
}

#[test]
fn render_then_parse_gives_the_snapshot_back() {
    let s = sample();
    assert_eq!(Snapshot::parse(&s.render()).unwrap(), s);
}

#[test]
fn parse_ignores_unknown_lines_and_kinds_and_rejects_other_files() {
    let text = format!("{}future 7\ncounters gauge x=1\n", sample().render());
    assert_eq!(Snapshot::parse(&text).unwrap(), sample());
    assert!(Snapshot::parse("hello\npid 1\n").is_err());
    assert!(Snapshot::parse(&format!("{MAGIC} 1\npid 1\ncounters pub published=x topic=t\n")).is_err());
}

#[test]
fn topic_totals_sum_publishers_and_subscriptions() {
    let t = sample().topics();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].published, t[0].delivered, t[0].lost, t[0].lag_bytes), (10, 9, 1, 64));
}

#[test]
fn exporter_writes_rewrites_and_removes_its_file() {
    let dir = std::env::temp_dir().join(format!("rdma-pubsub-stats-test-{}", std::process::id()));
    let counter = Arc::new(AtomicU64::new(1));
    let c = counter.clone();
    let exporter = Exporter::start(&dir, "x.stats".into(), Duration::from_millis(5), move || {
        let mut s = sample();
        s.updated_us = c.load(Ordering::Relaxed);
        Some(s)
    })
    .unwrap();
    let path = exporter.path().to_owned();
    assert_eq!(Snapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap().updated_us, 1);
    counter.store(7, Ordering::Relaxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Snapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap().updated_us != 7 {
        assert!(std::time::Instant::now() < deadline, "the file was not rewritten");
        std::thread::yield_now();
    }
    drop(exporter);
    assert!(!path.exists());
    let _ = std::fs::remove_dir(&dir);
}

fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdma-pubsub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn sample_exporter(dir: &Path) -> std::io::Result<Exporter> {
    Exporter::start(dir, "x.stats".into(), Duration::from_secs(3600), || Some(sample()))
}

#[test]
fn the_directory_is_created_private_and_refused_when_others_control_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = test_dir("stats-private");
    let exporter = sample_exporter(&dir).unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777, 0o700);
    drop(exporter);
    // Writable by others (as a world-writable /tmp-like directory would be): refused.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let e = sample_exporter(&dir).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "nothing written into it");
    // A symbolic link to a directory: refused, even one of ours.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = test_dir("stats-link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let e = sample_exporter(&link).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_link_planted_as_the_temporary_file_is_not_followed() {
    let dir = test_dir("stats-planted");
    std::fs::DirBuilder::new().create(&dir).unwrap();
    let victim = test_dir("stats-victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join(".x.stats.tmp")).unwrap();
    let exporter = sample_exporter(&dir).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "written through the link");
    assert_eq!(Snapshot::parse(&std::fs::read_to_string(exporter.path()).unwrap()).unwrap(), sample());
    drop(exporter);
    std::fs::remove_file(&victim).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_default_directory_is_per_user() {
    if std::env::var_os(DIR_ENV).is_some() {
        return;
    }
    let name = default_dir().file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(name, format!("rdma-pubsub-{}", own_uid().unwrap()));
}

#[test]
fn list_skips_dead_processes_and_temporary_files() {
    let dir = std::env::temp_dir().join(format!("rdma-pubsub-list-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut live = sample();
    live.pid = std::process::id();
    std::fs::write(dir.join(format!("{}-1.stats", live.pid)), live.render()).unwrap();
    std::fs::write(dir.join(format!(".{}-2.stats.tmp", live.pid)), live.render()).unwrap();
    // pid_max is at most 2^22: this pid cannot exist.
    let mut dead = sample();
    dead.pid = 4_194_305;
    std::fs::write(dir.join("4194305-1.stats"), dead.render()).unwrap();
    let found = list(&dir).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].snapshot, live);
    // The dead process's file and temporary file go; the live one's and other files stay.
    std::fs::write(dir.join(".4194305-2.stats.tmp"), dead.render()).unwrap();
    std::fs::write(dir.join("4194305-notes.txt"), "not a stats file").unwrap();
    assert_eq!(remove_dead(&dir).unwrap(), 2);
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    let pid = live.pid;
    let mut kept = [format!(".{pid}-2.stats.tmp"), format!("{pid}-1.stats"), "4194305-notes.txt".to_string()];
    kept.sort();
    assert_eq!(left, kept);
    std::fs::remove_dir_all(&dir).unwrap();
}
