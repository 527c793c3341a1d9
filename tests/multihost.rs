//! Three hosts as network namespaces on a bridge: one node each (soft fabric), discovery by
//! multicast across them, delivery checked; then one host's link is cut and restored: the other
//! two keep exchanging messages throughout, and the cut one resumes (reconnecting by itself).
//!
//! Topology, all made by the test and removed at the end (also on failure, by a drop guard):
//! namespace `<base>br` holds bridge `br0` (IGMP snooping off); namespaces `<base>a`, `<base>b`,
//! `<base>c` each hold `eth0` (10.77.0.1..3/24, multicast on, route 224.0.0.0/4 via eth0), a veth
//! whose peer is a port of the bridge. `<base>` contains the test's pid, so parallel runs do not
//! clash. The machine's own interfaces and routes are never touched.
//!
//! Each host is this test binary re-executed inside its namespace (`ip netns exec`) on the
//! ignored test `multihost_host`, told its role by an environment variable. A host publishes
//! its topic every 5 ms, subscribes to the other two, and prints a status line every 50 ms; the
//! test reads them (condition variable, bounded waits). It needs root and `ip`: otherwise it
//! prints why and returns.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdma_pubsub::{DiscoveryOptions, FabricKind, LostReason, Node, Policy, Start, SubscriptionEvent};

const ROLES: [&str; 3] = ["a", "b", "c"];
const WAIT: Duration = Duration::from_secs(30);
const HOST_ENV: &str = "RDMA_PUBSUB_MULTIHOST_HOST";

fn ip_of(role: &str) -> Ipv4Addr {
    let i = ROLES.iter().position(|r| *r == role).expect("role") as u8;
    Ipv4Addr::new(10, 77, 0, i + 1)
}

fn topic_of(role: &str) -> String {
    format!("host-{role}")
}

/// Runs `ip args...`; returns an error with its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The namespaces of one run; dropping it deletes them (and with them every veth and the
/// bridge).
struct Netns {
    base: String,
    made: Vec<String>,
}

impl Netns {
    fn ns(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }

    fn add(&mut self, suffix: &str) -> Result<String, String> {
        let name = self.ns(suffix);
        ip(&["netns", "add", &name])?;
        self.made.push(name.clone());
        Ok(name)
    }

    fn build() -> Result<Netns, String> {
        let mut n = Netns { base: format!("rpsmh{}", std::process::id()), made: Vec::new() };
        let br = n.add("br")?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for role in ROLES {
            let ns = n.add(role)?;
            let port = format!("p{role}");
            ip(&["-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &br])?;
            ip(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", ip_of(role)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            n.link_up(role)?;
        }
        Ok(n)
    }

    fn link_up(&self, role: &str) -> Result<(), String> {
        let ns = self.ns(role);
        ip(&["-n", &ns, "link", "set", "eth0", "up", "multicast", "on"])?;
        // Taking the link down removed the route: (re)add it.
        ip(&["-n", &ns, "route", "replace", "224.0.0.0/4", "dev", "eth0"])
    }

    fn link_down(&self, role: &str) -> Result<(), String> {
        ip(&["-n", &self.ns(role), "link", "set", "eth0", "down"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in self.made.iter().rev() {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// The last status line of each host: `field=value` pairs.
type Statuses = Arc<(Mutex<HashMap<String, HashMap<String, u64>>>, Condvar)>;

/// A host process; killed on drop if still running.
struct Host {
    child: Child,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_host(net: &Netns, role: &str, statuses: &Statuses, finals: &Arc<Mutex<Vec<String>>>) -> Host {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &net.ns(role)])
        .arg(exe)
        .args(["multihost_host", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(HOST_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a host");
    let out = child.stdout.take().expect("stdout");
    let (statuses, finals, role) = (statuses.clone(), finals.clone(), role.to_string());
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Some(rest) = line.strip_prefix("status ").or_else(|| line.strip_prefix("final ")) else { continue };
            let fields: HashMap<String, u64> = rest
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                .collect();
            if line.starts_with("final ") {
                finals.lock().unwrap().push(format!("{role}: {rest}"));
            }
            let (lock, cv) = &*statuses;
            lock.lock().unwrap().insert(role.clone(), fields);
            cv.notify_all();
        }
    });
    Host { child }
}

/// Waits until `cond` holds on the statuses, failing after [`WAIT`] with `what`.
fn wait_for(statuses: &Statuses, what: &str, cond: impl Fn(&HashMap<String, HashMap<String, u64>>) -> bool) {
    let (lock, cv) = &**statuses;
    let deadline = Instant::now() + WAIT;
    let mut s = lock.lock().unwrap();
    while !cond(&s) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out waiting for {what}; statuses: {s:?}");
        s = cv.wait_timeout(s, left).unwrap().0;
    }
}

fn get(s: &HashMap<String, HashMap<String, u64>>, role: &str, field: &str) -> u64 {
    s.get(role).and_then(|f| f.get(field)).copied().unwrap_or(0)
}

fn snapshot(statuses: &Statuses) -> HashMap<String, HashMap<String, u64>> {
    statuses.0.lock().unwrap().clone()
}

#[test]
fn three_namespaced_hosts_discover_each_other_and_survive_a_link_cut() {
    // Root: the effective uid (second field of `Uid:`) is 0.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false);
    if !root || Command::new("ip").arg("-V").output().is_err() {
        println!("multihost: skipped (needs root and the `ip` command to make network namespaces)");
        return;
    }
    let net = match Netns::build() {
        Ok(n) => n,
        Err(e) => {
            println!("multihost: skipped (cannot make network namespaces: {e})");
            return;
        }
    };
    let statuses: Statuses = Arc::new((Mutex::new(HashMap::new()), Condvar::new()));
    let finals = Arc::new(Mutex::new(Vec::new()));
    let mut hosts: Vec<Host> = ROLES.iter().map(|r| spawn_host(&net, r, &statuses, &finals)).collect();

    // Everyone receives everyone else.
    wait_for(&statuses, "delivery between all hosts", |s| {
        ROLES.iter().all(|r| ROLES.iter().filter(|o| *o != r).all(|o| get(s, r, &format!("from_{o}")) >= 20))
    });

    // Cut host c.
    net.link_down("c").expect("cut c's link");
    let at_cut = snapshot(&statuses);
    wait_for(&statuses, "a and b losing c, c losing a and b, a and b continuing", |s| {
        get(s, "a", "lost_silent") >= 1
            && get(s, "b", "lost_silent") >= 1
            && get(s, "c", "lost_silent") >= 2
            && get(s, "a", "from_b") >= get(&at_cut, "a", "from_b") + 100
            && get(s, "b", "from_a") >= get(&at_cut, "b", "from_a") + 100
    });

    // Restore it.
    let at_restore = snapshot(&statuses);
    net.link_up("c").expect("restore c's link");
    wait_for(&statuses, "c resuming both ways, catching up with what was published during the cut", |s| {
        let caught_up = |r: &str, o: &str| get(s, r, &format!("from_{o}")) >= get(&at_restore, o, "published");
        let grew = |r: &str, o: &str| get(s, r, &format!("from_{o}")) >= get(&at_restore, r, &format!("from_{o}")) + 50;
        grew("c", "a")
            && grew("c", "b")
            && grew("a", "c")
            && grew("b", "c")
            && grew("a", "b")
            && ROLES.iter().all(|r| get(s, r, "reconnects") >= 1)
            && caught_up("a", "c")
            && caught_up("b", "c")
            && caught_up("c", "a")
            && caught_up("c", "b")
    });

    // Stop the hosts and check their verdicts.
    for h in &mut hosts {
        let _ = h.child.stdin.as_mut().expect("stdin").write_all(b"stop\n");
    }
    let deadline = Instant::now() + WAIT;
    for h in &mut hosts {
        let status = loop {
            if let Some(st) = h.child.try_wait().expect("wait for a host") {
                break st;
            }
            assert!(Instant::now() < deadline, "a host did not stop");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "a host failed: {status}");
    }
    let finals = finals.lock().unwrap().clone();
    assert_eq!(finals.len(), 3, "final lines: {finals:?}");
    for f in &finals {
        println!("multihost: {f}");
        // Reconnections resume each stream where it stopped: no duplicate, reordering or gap.
        for clean in [" duplicates=0 ", " disorder=0 ", " gaps=0"] {
            assert!(f.contains(clean), "a host's streams were not clean: {f}");
        }
    }
    drop(hosts);
    drop(net);
}

/// One host, inside its namespace: publishes `host-<role>` every 5 ms and subscribes to the
/// other two topics, checking that each (publisher, epoch) stream arrives in order without
/// duplicates. Prints `status`/`final` lines; stops on "stop" on stdin (or after 120 s).
#[test]
#[ignore = "runs inside a network namespace for three_namespaced_hosts_discover_each_other_and_survive_a_link_cut"]
fn multihost_host() {
    let Ok(role) = std::env::var(HOST_ENV) else { return };
    let me = ip_of(&role);
    // IP_MULTICAST_IF = this namespace's address (the default: the bind address).
    let discovery = DiscoveryOptions::default().group(Ipv4Addr::new(239, 255, 77, 1)).port(17477);
    let node = Node::builder()
        .fabric(FabricKind::Soft)
        .bind(SocketAddr::from((me, 0)))
        .discovery(discovery)
        .build()
        .expect("host node");
    let publisher = Arc::new(node.publisher(topic_of(&role)).policy(Policy::Overwrite).create().expect("publisher"));
    let stop = Arc::new(AtomicBool::new(false));
    let pub_thread = {
        let (publisher, stop) = (publisher.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 0u64;
            while !stop.load(Ordering::Acquire) {
                seq += 1;
                publisher.publish(&seq.to_le_bytes()).expect("publish");
                std::thread::sleep(Duration::from_millis(5)); // the publishing rate, not a synchronisation
            }
        })
    };
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line.trim() == "stop" {
                    break;
                }
                line.clear();
            }
            stop.store(true, Ordering::Release);
        });
    }
    let others: Vec<&str> = ROLES.iter().copied().filter(|r| *r != role).collect();
    let mut subs: Vec<_> =
        others.iter().map(|o| node.subscriber(topic_of(o)).start(Start::Earliest).create().unwrap()).collect();
    let mut received = vec![0u64; others.len()];
    let mut last: HashMap<(u64, u64), u64> = HashMap::new();
    let (mut duplicates, mut disorder, mut gaps, mut lost_silent) = (0u64, 0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut next_status = Instant::now();
    let status = |kind: &str, received: &[u64], subs: &[rdma_pubsub::Subscription], [d, o, g, l]: [u64; 4]| {
        let reconnects: u64 = subs.iter().map(|s| s.counters().reconnects()).sum();
        let from: Vec<String> = others.iter().zip(received).map(|(o, n)| format!("from_{o}={n}")).collect();
        let published = publisher.next_seq() - 1;
        println!(
            "{kind} published={published} {} reconnects={reconnects} lost_silent={l} duplicates={d} disorder={o} gaps={g}",
            from.join(" ")
        );
    };
    while !stop.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(120) {
        for (i, sub) in subs.iter_mut().enumerate() {
            let mut batch = Vec::new();
            if let Ok(Some(m)) = sub.recv_timeout(Duration::from_millis(2)) {
                batch.push(m);
                while let Ok(Some(m)) = sub.try_recv() {
                    batch.push(m);
                    if batch.len() >= 512 {
                        break;
                    }
                }
            }
            for m in batch {
                let seq = u64::from_le_bytes(m.data[..8].try_into().expect("8 bytes"));
                assert_eq!(seq, m.seq, "payload carries its sequence");
                let prev = last.insert((m.publisher.id, m.publisher.epoch), m.seq);
                match prev {
                    Some(p) if p == m.seq => duplicates += 1,
                    Some(p) if p > m.seq => disorder += 1,
                    Some(p) if p + 1 < m.seq => gaps += 1,
                    None if m.seq != 1 => gaps += 1,
                    _ => {}
                }
                received[i] += 1;
            }
            while let Some(e) = sub.try_event() {
                if matches!(e, SubscriptionEvent::PublisherLost { reason: LostReason::Silent, .. }) {
                    lost_silent += 1;
                }
            }
        }
        if Instant::now() >= next_status {
            status("status", &received, &subs, [duplicates, disorder, gaps, lost_silent]);
            next_status = Instant::now() + Duration::from_millis(50);
        }
    }
    stop.store(true, Ordering::Release);
    pub_thread.join().expect("publishing thread");
    status("final", &received, &subs, [duplicates, disorder, gaps, lost_silent]);
}
