//! `pubsub-demo bench`: its JSON and table, plots, subscriber processes and their faults, publisher placement.

use super::*;

#[test]
fn bench_prints_the_matrix_as_json() {
    let dir = stats_dir("bench");
    let args = [
        "bench",
        "--sizes",
        "64,4096",
        "--subscribers",
        "1,2",
        "--messages",
        "2000",
        "--seconds",
        "0.3",
        "--json",
        "--no-limits",
    ];
    let out = run(&dir, &args, Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let points: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("stdout is a JSON array");
    assert_eq!(points.len(), 4);
    for p in &points {
        for field in [
            "size",
            "subscribers",
            "msgs_per_sec",
            "mb_per_sec",
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
            "pub_cpu_us",
            "sub_cpu_us",
        ] {
            assert!(p[field].as_f64().is_some_and(|v| v > 0.0), "{field} of {p}");
        }
        assert!(p["other_cpu_us"].as_f64().is_some_and(|v| v >= 0.0), "other_cpu_us of {p}");
        assert_eq!(p["policy"], "block");
        assert_eq!(p["separate_processes"], false);
        assert_eq!(p["lost"], 0);
        assert_eq!(p["damaged"], 0);
        assert!(p["p50_us"].as_f64() <= p["p99_us"].as_f64() && p["p99_us"].as_f64() <= p["max_us"].as_f64());
    }
    assert_eq!(points[3]["size"], 4096);
    assert_eq!(points[3]["subscribers"], 2);
    assert!(out.stderr.contains("taskset"), "the thread placement note: {}", out.stderr);
    assert!(!out.stderr.contains("memcpy"), "--no-limits measures no limits: {}", out.stderr);
}

/// The non-comment, non-empty lines of a `bench` table, split into fields.
fn table(stdout: &str) -> Vec<Vec<&str>> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[test]
fn bench_table_header_names_every_column() {
    let dir = stats_dir("bench-table");
    let args = ["bench", "--sizes", "64", "--subscribers", "1,2", "--messages", "2000", "--seconds", "0.3"];
    let out = run(&dir, &args, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines = table(&out.stdout);
    assert_eq!(lines.len(), 3, "a header and two rows:\n{}", out.stdout);
    // The machine's own limits, in comment lines before the table.
    let limits: Vec<&str> =
        out.stdout.lines().filter(|l| l.starts_with("# limits") || l.starts_with("# one TCP")).collect();
    assert_eq!(limits.len(), 2, "{}", out.stdout);
    assert!(limits[0].contains("memcpy GB/s 64 B "), "{}", limits[0]);
    assert!(limits[1].contains("one TCP stream over 127.0.0.1: ") && limits[1].ends_with("GB/s."), "{}", limits[1]);
    let header = &lines[0];
    for name in ["size", "subs", "msgs/s", "MB/s", "lost", "doorbells/msg", "pub_cpu_us", "sub_cpu_us", "other_cpu_us"]
    {
        assert!(header.contains(&name), "{name} in the header {header:?}");
    }
    for row in &lines[1..] {
        assert_eq!(row.len(), header.len(), "a field per column: {header:?} / {row:?}");
        assert_eq!(row[0], "64");
        for (name, value) in header.iter().zip(row).filter(|(n, _)| n.ends_with("cpu_us")) {
            // The other threads may have nothing to do: the subscribers read the ring in place.
            let least = if *name == "other_cpu_us" { 0.0 } else { f64::MIN_POSITIVE };
            assert!(value.parse::<f64>().is_ok_and(|v| v >= least), "{name} = {value}");
        }
    }
}

/// Asserts `doc` is an SVG document whose elements all close in order (XML-ish: no entities
/// but the escaped ones, no comments, no CDATA).
fn assert_well_formed_svg(doc: &str) {
    assert!(doc.starts_with("<svg"), "starts with <svg: {:?}", &doc[..doc.len().min(80)]);
    let mut open: Vec<&str> = Vec::new();
    let mut rest = doc;
    while let Some(start) = rest.find('<') {
        let text = &rest[..start];
        assert!(!text.contains('>'), "a stray '>' in {text:?}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(["&amp;", "&lt;", "&gt;"].iter().any(|e| entity.starts_with(e)), "a bare '&' in {text:?}");
        }
        let end = rest[start..].find('>').expect("a tag ends") + start;
        let tag = &rest[start + 1..end];
        assert!(!tag.contains('<'), "a '<' inside the tag {tag:?}");
        assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes in {tag:?}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name.trim()), "</{name}> closes what was opened");
        } else if !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().expect("a tag name"));
        }
        rest = &rest[end + 1..];
        if open.is_empty() {
            break;
        }
    }
    assert!(open.is_empty(), "unclosed elements {open:?}");
    assert!(rest.trim().is_empty(), "nothing after </svg>: {rest:?}");
}

#[test]
fn bench_plot_draws_a_line_per_subscriber_count_in_each_panel() {
    let dir = stats_dir("bench-plot");
    let file = dir.join("bench.svg");
    let path = file.to_str().expect("a UTF-8 path");
    let args = [
        "bench",
        "--sizes",
        "64,1024",
        "--subscribers",
        "1,2",
        "--messages",
        "2000",
        "--seconds",
        "0.3",
        "--json",
        "--plot",
        path,
    ];
    let out = run(&dir, &args, Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("# plot: {path}")), "{}", out.stderr);
    let doc = std::fs::read_to_string(&file).expect("the plot was written");
    assert_well_formed_svg(&doc);
    // Two panels (msgs/s, MB/s), each with one line per subscriber count.
    assert_eq!(doc.matches("<polyline class=\"series\"").count(), 4, "{doc}");
    for count in ["1", "2"] {
        assert_eq!(doc.matches(&format!("data-subscribers=\"{count}\"")).count(), 2, "{doc}");
    }
    assert!(doc.contains(">1 subscriber</text>") && doc.contains(">2 subscribers</text>"), "the legend: {doc}");
    for size in ["64 B", "1 KiB"] {
        let tick = "class=\"xtick\"";
        let labelled = doc.lines().filter(|l| l.contains(tick) && l.contains(&format!(">{size}</text>"))).count();
        assert_eq!(labelled, 2, "the tick label {size} in both panels: {doc}");
    }
    for label in ["message size (log scale)", "msgs/s (log scale)", "MB/s (log scale)"] {
        assert!(doc.contains(&format!(">{label}</text>")), "the axis label {label}: {doc}");
    }
    // A file that cannot be created fails at once.
    let missing = dir.join("no-such-directory").join("bench.svg");
    let out = run(&dir, &["bench", "--plot", missing.to_str().unwrap()], Duration::from_secs(20));
    assert_user_error(&out, "cannot create the file");
}

/// Over the network the soft fabric's NIC threads move every READ: the bench charges their CPU
/// time to `other_cpu_us`, beside the publisher's and the subscribers'.
#[test]
fn bench_shows_the_cpu_time_of_the_fabric_threads_per_message() {
    let dir = stats_dir("bench-other-cpu");
    let args = [
        "bench",
        "--same-host",
        "off",
        "--sizes",
        "65536",
        "--subscribers",
        "1",
        "--messages",
        "2000",
        "--seconds",
        "0.3",
        "--no-limits",
        "--json",
    ];
    let out = run(&dir, &args, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("other_cpu_us = the CPU time of this"), "the note: {}", out.stderr);
    let points: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("stdout is a JSON array");
    assert_eq!(points.len(), 1);
    let p = &points[0];
    // Each 64 KiB message crosses two sockets in the NIC threads: far more than a microsecond.
    assert!(p["other_cpu_us"].as_f64().is_some_and(|v| v > 1.0), "other_cpu_us of {p}");
}

#[test]
fn bench_can_run_each_subscriber_in_a_process_of_its_own() {
    let dir = stats_dir("bench-processes");
    let cpus = allowed_cpus();
    let mut args = vec![
        "bench",
        "--separate-processes",
        "--sizes",
        "64,4096",
        "--subscribers",
        "1,2",
        "--messages",
        "2000",
        "--seconds",
        "0.3",
        "--json",
    ];
    // Subscriber processes follow the placement of subscriber threads.
    let pinned = cpus.len() >= 2;
    if pinned {
        args.push("--pin-publisher");
    }
    let out = run(&dir, &args, Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("one process per subscriber"), "the note: {}", out.stderr);
    let points: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("stdout is a JSON array");
    assert_eq!(points.len(), 4);
    for p in &points {
        assert_eq!(p["separate_processes"], true, "{p}");
        for field in ["msgs_per_sec", "mb_per_sec", "p50_us", "p99_us", "max_us", "pub_cpu_us", "sub_cpu_us"] {
            assert!(p[field].as_f64().is_some_and(|v| v > 0.0), "{field} of {p}");
        }
        assert!(p["p50_us"].as_f64() <= p["p99_us"].as_f64() && p["p99_us"].as_f64() <= p["max_us"].as_f64());
        assert_eq!(p["lost"], 0, "{p}");
        assert_eq!(p["damaged"], 0, "{p}");
        if pinned {
            let cpu = cpus[0].to_string();
            assert_eq!(p["publisher_cpus"], cpu.as_str(), "{p}");
            let subscriber_cpus: Vec<&str> = p["subscriber_cpus"].as_str().expect("a CPU list").split(',').collect();
            assert!(!subscriber_cpus.contains(&cpu.as_str()), "subscribers share the publisher's CPU: {p}");
        }
    }
    assert_eq!(points[3]["size"], 4096);
    assert_eq!(points[3]["subscribers"], 2);
    // Every subscriber process removed its node's stats file.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "stats files left behind");
}

/// Runs a `bench --separate-processes` whose subscriber process 0 misbehaves as `fault` says
/// (see `PUBSUB_DEMO_BENCH_FAULT` in the demo's bench/processes.rs); returns the error line
/// after checking it names that process, which is gone.
fn bench_with_fault(fault: &str, size: &str, seconds: &str, needle: &str) -> String {
    let dir = stats_dir(&format!("bench-fault-{}", fault.replace('@', "-")));
    let args = ["bench", "--separate-processes", "--sizes", size, "--subscribers", "2", "--messages", "2000"];
    let mut cmd = command(&dir, &[&args[..], &["--seconds", seconds]].concat());
    cmd.env("PUBSUB_DEMO_BENCH_FAULT", fault);
    let started = Instant::now();
    let out = finish(cmd.spawn().expect("start pubsub-demo"), Duration::from_secs(60), &format!("bench with {fault}"));
    assert_user_error(&out, needle);
    assert!(out.stderr.contains("subscriber process 0 (pid "), "{}", out.stderr);
    let pid: u32 = out.stderr.split("(pid ").nth(1).and_then(|r| r.split(')').next()).unwrap().parse().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("subscriber-of"),
        "subscriber process {pid} outlived the bench"
    );
    assert!(started.elapsed() < Duration::from_secs(40), "took {:?}", started.elapsed());
    out.stderr
}

#[test]
fn bench_names_a_subscriber_process_that_exits() {
    let line = bench_with_fault("exit@latency", "64", "0.3", "exited before the end of the point");
    assert!(line.contains("exit status: 3"), "{line}");
    assert!(line.contains("size 64 B, 2 subscribers"), "{line}");
}

#[test]
fn bench_names_a_subscriber_process_that_hangs() {
    // In the latency run: it stops reporting.
    bench_with_fault("hang@latency", "64", "0.3", "reported nothing for 10 s");
    // In the throughput run: it stops at its first report (message 1024) and holds up the
    // Block publisher (a ring of sixteen 64 KiB messages) before the 2000 messages are out,
    // within the 18 s of the run, so the publish times out (after 5 s).
    let line = bench_with_fault("hang@1", "65536", "30", "has reported nothing for");
    assert!(line.contains("publish"), "{line}");
}

/// The CPUs this test process may use.
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list");
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().expect("a CPU number")..=b.parse::<usize>().expect("a CPU number"));
    }
    cpus
}

#[test]
fn bench_can_give_the_publisher_a_cpu_of_its_own() {
    let dir = stats_dir("pinned");
    let cpus = allowed_cpus();
    let cpu = cpus[0].to_string();
    let args = ["bench", "--sizes", "64", "--subscribers", "1,2", "--messages", "500", "--seconds", "0.2", "--json"];
    // Without a value: the first allowed CPU.
    let out = run(&dir, &[&args[..], &["--pin-publisher"]].concat(), Duration::from_secs(60));
    if cpus.len() < 2 {
        assert_user_error(&out, "needs at least two allowed CPUs");
        return;
    }
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("alone on CPU {cpu}")), "the placement note: {}", out.stderr);
    let points: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("stdout is a JSON array");
    assert_eq!(points.len(), 2);
    for p in &points {
        assert_eq!(p["publisher_cpus"], cpu.as_str(), "{p}");
        let subscriber_cpus: Vec<&str> = p["subscriber_cpus"].as_str().expect("a CPU list").split(',').collect();
        assert!(!subscriber_cpus.contains(&cpu.as_str()), "subscribers share the publisher's CPU: {p}");
        assert_eq!(subscriber_cpus.len(), cpus.len() - 1, "subscribers on every other CPU: {p}");
    }
    // A CPU the process may not use is a user error.
    let out = run(&dir, &[&args[..], &["--pin-publisher", "100000"]].concat(), Duration::from_secs(20));
    assert_user_error(&out, "not among the allowed CPUs");
}

/// `--latency-gap` pauses the latency run longer than a subscription spins, so each subscriber
/// parks between messages and the publisher's doorbell wakes it (network path: the same host
/// parks the same way, but this is the path the parked latency is quoted for).
#[test]
fn bench_latency_gap_makes_the_subscriber_park_between_messages() {
    let dir = stats_dir("bench-gap");
    let args = [
        "bench",
        "--same-host",
        "off",
        "--sizes",
        "64",
        "--subscribers",
        "1",
        "--messages",
        "200",
        "--seconds",
        "0.1",
        "--latency-gap",
        "2000",
        "--json",
        "--no-limits",
    ];
    let out = run(&dir, &args, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let points: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("stdout is a JSON array");
    assert_eq!(points.len(), 1);
    let doorbells = points[0]["lat_doorbells_per_msg"].as_f64().expect("lat_doorbells_per_msg");
    // About one a message; a subscriber thread that got no CPU through a whole gap finds the
    // next message without one, hence the margin.
    assert!(doorbells > 0.5, "{doorbells} doorbells per latency message: {}", points[0]);
    // The subscriber READs the ring: each doorbell brings the message it wakes it for.
    let records = points[0]["lat_doorbell_records_per_msg"].as_f64().expect("lat_doorbell_records_per_msg");
    assert!(records > 0.5, "{records} doorbells with records per latency message: {}", points[0]);
    assert_eq!(points[0]["lost"], 0);
}
