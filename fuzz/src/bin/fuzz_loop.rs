//! The fuzz targets without libFuzzer (which needs a nightly compiler): feeds each target N
//! inputs from a seeded generator (random bytes, and mutations of the target's seeds and of
//! earlier inputs: bit flips, byte sets, interesting values, truncations, extensions, splices,
//! duplicated chunks) and reports the count. A panic prints the target, the input index and
//! the input in hex, then aborts with a failure.
//!
//! Usage: `fuzz-loop <target|all> [executions] [seed]`, or `fuzz-loop --write-corpus <dir>` to
//! write the seeds as libFuzzer corpus files (`<dir>/<target>/seed-N`).

use std::panic;
use std::time::Instant;

use rdma_pubsub_fuzz::TARGETS;

/// xorshift64*: deterministic for a given seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u8] = &[0, 1, 0x7f, 0x80, 0xff, 0xfe, 0x40, 0x20, 0x10];
/// Largest generated input.
const MAX_LEN: usize = 4096;

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(9) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            2 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            3 if !input.is_empty() => {
                let at = rng.below(input.len());
                input.truncate(at);
            }
            4 => {
                for _ in 0..1 + rng.below(16) {
                    input.push(rng.next() as u8);
                }
            }
            5 if input.len() >= 8 => {
                // An interesting little-endian word (varint boundaries, lengths, huge values).
                let i = rng.below(input.len() - 7);
                let v: u64 = match rng.below(6) {
                    0 => u64::MAX,
                    1 => 250,
                    2 => 251,
                    3 => 1 << rng.below(64),
                    4 => (1 << rng.below(64)) - 1,
                    _ => 65536,
                };
                let n = [1usize, 2, 4, 8][rng.below(4)];
                input[i..i + n].copy_from_slice(&v.to_le_bytes()[..n]);
            }
            6 if !pool.is_empty() => {
                // Splice: our prefix, another input's suffix.
                let other = &pool[rng.below(pool.len())];
                let cut = rng.below(input.len() + 1);
                let from = rng.below(other.len() + 1);
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            7 if input.len() >= 2 => {
                // Duplicate or remove a chunk.
                let a = rng.below(input.len());
                let b = (a + 1 + rng.below(32)).min(input.len());
                if rng.below(2) == 0 {
                    let chunk = input[a..b].to_vec();
                    input.splice(a..a, chunk);
                } else {
                    input.drain(a..b);
                }
            }
            _ => {
                if let Some(last) = input.last_mut() {
                    *last = last.wrapping_add(1);
                }
            }
        }
    }
    input.truncate(MAX_LEN);
}

fn run(name: &str, target: rdma_pubsub_fuzz::Target, seeds: Vec<Vec<u8>>, execs: u64, seed: u64) -> u64 {
    let mut rng =
        Rng(seed ^ name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)));
    // A small pool of recent inputs that decoded far enough to be worth mutating further.
    let mut pool: Vec<Vec<u8>> = seeds.clone();
    let started = Instant::now();
    let mut input = Vec::new();
    let mut accepted = 0u64;
    for i in 0..execs {
        input.clear();
        match rng.below(10) {
            0 => {
                let max = if rng.below(4) == 0 { MAX_LEN } else { 96 };
                let len = rng.below(max);
                input.extend((0..len).map(|_| rng.next() as u8));
            }
            1..=3 if !seeds.is_empty() => {
                input.extend_from_slice(&seeds[rng.below(seeds.len())]);
                mutate(&mut rng, &mut input, &pool);
            }
            _ => {
                input.extend_from_slice(&pool[rng.below(pool.len())]);
                mutate(&mut rng, &mut input, &pool);
            }
        }
        let result = panic::catch_unwind(|| target(&input));
        let ok = match result {
            Ok(ok) => ok,
            Err(e) => {
                let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
                eprintln!("CRASH in {name} at execution {i}: input ({} bytes) {hex}", input.len());
                panic::resume_unwind(e);
            }
        };
        accepted += u64::from(ok);
        // Keep accepted inputs and a few others inputs as mutation material (bounded pool, deterministic).
        if (ok && rng.below(8) == 0) || rng.below(256) == 0 {
            if pool.len() < 256 {
                pool.push(input.clone());
            } else {
                let k = seeds.len() + rng.below(256 - seeds.len());
                pool[k] = input.clone();
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{name}: {execs} executions without a crash in {secs:.1} s ({:.0}/s), {accepted} accepted",
        execs as f64 / secs
    );
    execs
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--write-corpus") {
        let dir = std::path::PathBuf::from(args.get(1).map(String::as_str).unwrap_or("corpus"));
        for (name, _, seeds) in TARGETS {
            let d = dir.join(name);
            std::fs::create_dir_all(&d).expect("create the corpus directory");
            for (i, s) in seeds().iter().enumerate() {
                std::fs::write(d.join(format!("seed-{i}")), s).expect("write a seed");
            }
        }
        return;
    }
    let which = args.first().map(String::as_str).unwrap_or("all");
    let execs: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    // Panics are reported with their input above; keep the default hook's message too.
    let mut total = 0;
    let mut found = false;
    for (name, target, seeds) in TARGETS {
        if which == "all" || which == *name {
            found = true;
            total += run(name, *target, seeds(), execs, seed);
        }
    }
    if !found {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
        eprintln!("unknown target {which}; targets: {}", names.join(", "));
        std::process::exit(2);
    }
    println!("{total} executions in all");
}
