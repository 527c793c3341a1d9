//! `stat`: lists the rdma-pubsub nodes running on this host (from their stats files; files
//! of dead processes are skipped) and shows their counters, refreshed, with rates.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use rdma_pubsub::stats::{self, Found, Section};

use crate::cli::StatArgs;
use crate::Fail;

/// Counters shown with a per-second rate.
const RATED: [&str; 3] = ["published", "delivered", "bytes"];

/// Runs `stat`.
pub fn run(args: &StatArgs) -> Result<(), Fail> {
    let dir = args.dir.clone().unwrap_or_else(stats::default_dir);
    let mut previous: HashMap<(u32, u64), (Instant, Found)> = HashMap::new();
    let live = !args.once;
    let clear = live && std::io::stdout().is_terminal();
    loop {
        // Files of dead processes (killed nodes cannot remove theirs) are cleaned up as seen.
        let _ = stats::remove_dead(&dir);
        let found = stats::list(&dir)
            .map_err(|e| Fail::Usage(format!("cannot read {}: {e}; give the directory with --dir", dir.display())))?;
        let now = Instant::now();
        let text = render(&dir, &found, &previous, now);
        let mut out = std::io::stdout().lock();
        if clear {
            let _ = out.write_all(b"\x1b[H\x1b[2J");
        }
        if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
            // Stdout closed (e.g. piped into head): nothing more to show.
            return Ok(());
        }
        drop(out);
        if !live {
            return Ok(());
        }
        previous = found.into_iter().map(|f| ((f.snapshot.pid, f.snapshot.node_id), (now, f))).collect();
        std::thread::sleep(Duration::from_millis(args.interval));
    }
}

fn render(dir: &Path, found: &[Found], previous: &HashMap<(u32, u64), (Instant, Found)>, now: Instant) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "rdma-pubsub nodes on this host ({}): {}", dir.display(), found.len());
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
    for f in found {
        let s = &f.snapshot;
        let age = now_us.saturating_sub(s.updated_us) as f64 / 1e6;
        let _ = writeln!(
            out,
            "\npid {}  node {:016x}  {}  {} fabric  updated {age:.1} s ago",
            s.pid, s.node_id, s.addr, s.fabric
        );
        let before = previous.get(&(s.pid, s.node_id));
        let secs = before.map(|(t, _)| now.duration_since(*t).as_secs_f64()).unwrap_or(0.0);
        for (i, section) in s.sections.iter().enumerate() {
            let old = before.and_then(|(_, f)| matching(&f.snapshot.sections, section, i));
            let _ = writeln!(out, "{}", line(section, old, secs));
        }
        let topics = s.topics();
        if !topics.is_empty() {
            let _ = writeln!(
                out,
                "  {:<24} {:>4} {:>4} {:>12} {:>12} {:>10} {:>8} {:>12}",
                "topic", "pubs", "subs", "published", "delivered", "lost", "dropped", "lag bytes"
            );
            for t in topics {
                let _ = writeln!(
                    out,
                    "  {:<24} {:>4} {:>4} {:>12} {:>12} {:>10} {:>8} {:>12}",
                    t.topic, t.publishers, t.subscriptions, t.published, t.delivered, t.lost, t.dropped, t.lag_bytes
                );
            }
        }
    }
    if found.is_empty() {
        let _ =
            writeln!(out, "(no running node writes stats there; nodes write them unless built with stats_dir(None))");
    }
    out
}

/// The section of the previous snapshot that is the same publisher or subscription.
fn matching<'a>(old: &'a [Section], s: &Section, index: usize) -> Option<&'a Section> {
    let same = |o: &&Section| o.kind == s.kind && o.topic == s.topic && o.get("id") == s.get("id");
    old.get(index).filter(same).or_else(|| old.iter().find(same))
}

fn line(s: &Section, old: Option<&Section>, secs: f64) -> String {
    let kind = s.kind.tag();
    let mut text = format!("  {kind:<4} {:<24}", s.topic.as_deref().unwrap_or("-"));
    for (name, value) in &s.values {
        if name == "id" {
            continue;
        }
        let _ = write!(text, " {name}={value}");
        if let (true, Some(old)) = (RATED.contains(&name.as_str()) && secs > 0.0, old) {
            let rate = value.saturating_sub(old.get(name)) as f64 / secs;
            if name == "bytes" {
                let _ = write!(text, " ({:.1} MB/s)", rate / 1e6);
            } else {
                let _ = write!(text, " ({rate:.0}/s)");
            }
        }
    }
    text
}
