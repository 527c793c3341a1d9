//! The machine's own limits, measured by `bench` itself and printed beside its figures (unless
//! `--no-limits`): memcpy of each message size, and one TCP stream over the interface the
//! bench binds to. A reader then sees how close to the machine each point is: the ring's copy
//! and a subscriber's READ each move a message's bytes once, as memcpy does, and the TCP
//! stream is what the same host moves through the kernel's network stack without RDMA.

use std::hint::black_box;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// Time spent copying each message size.
const MEMCPY_TIME: Duration = Duration::from_millis(20);
/// Time the TCP stream writes for.
const TCP_TIME: Duration = Duration::from_millis(200);
/// Bytes of each TCP write and read.
const TCP_CHUNK: usize = 256 * 1024;

/// What was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Each size (bytes) and the GB/s (10^9 bytes/s) of copying it with memcpy, over and over.
    pub memcpy: Vec<(u64, f64)>,
    /// GB/s of one TCP stream from this process to itself over the bench's address, or why
    /// it could not be measured.
    pub tcp: Result<f64, String>,
}

impl Limits {
    /// Measures memcpy for each of `sizes` and one TCP stream over `ip` (about 0.2 s plus
    /// 20 ms per size).
    pub fn measure(sizes: &[u64], ip: IpAddr) -> Limits {
        Limits {
            memcpy: sizes.iter().map(|&s| (s, memcpy_gb_per_sec(s as usize))).collect(),
            tcp: tcp_gb_per_sec(ip).map_err(|e| e.to_string()),
        }
    }

    /// The comment lines of the bench's note.
    pub fn note(&self, ip: IpAddr) -> String {
        let copies: Vec<String> = self.memcpy.iter().map(|(s, gb)| format!("{s} B {gb:.1}")).collect();
        let tcp = match &self.tcp {
            Ok(gb) => format!("{gb:.2} GB/s"),
            Err(e) => format!("not measured ({e})"),
        };
        format!(
            "# limits of this machine, measured here (--no-limits skips them): memcpy GB/s {};\n\
             # one TCP stream over {ip}: {tcp}.",
            copies.join(", ")
        )
    }
}

/// GB/s of copying `size` bytes from one buffer to another, over and over, for
/// [`MEMCPY_TIME`].
fn memcpy_gb_per_sec(size: usize) -> f64 {
    let src = vec![0x5a_u8; size];
    let mut dst = vec![0_u8; size];
    let mut batch = 1_u64;
    let mut copied = 0_u64;
    let start = Instant::now();
    loop {
        for _ in 0..batch {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        }
        copied += batch * size as u64;
        let elapsed = start.elapsed();
        if elapsed >= MEMCPY_TIME {
            return copied as f64 / elapsed.as_secs_f64() / 1e9;
        }
        // Batches of about a millisecond: the clock is read rarely at small sizes.
        batch = (batch * 2).min((1 << 20) / (size as u64 / 64).max(1));
    }
}

/// GB/s of one TCP stream from this process to itself over `ip`: writes for [`TCP_TIME`], then
/// counts until the reader has had every byte.
fn tcp_gb_per_sec(ip: IpAddr) -> io::Result<f64> {
    let listener = TcpListener::bind((ip, 0))?;
    let mut writer = TcpStream::connect(listener.local_addr()?)?;
    // The kernel completed the handshake: accepting does not wait.
    let (mut reader, _) = listener.accept()?;
    let reading = thread::Builder::new().name("bench-tcp-limit".into()).spawn(move || -> io::Result<u64> {
        let mut buf = vec![0_u8; TCP_CHUNK];
        let mut total = 0;
        loop {
            match reader.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    })?;
    let chunk = vec![0x5a_u8; TCP_CHUNK];
    let start = Instant::now();
    let written = (|| {
        while start.elapsed() < TCP_TIME {
            writer.write_all(&chunk)?;
        }
        writer.shutdown(Shutdown::Write)
    })();
    // On a write error the reader still ends: the writer's drop closes the stream.
    drop(writer);
    let received = reading.join().map_err(|_| io::Error::other("the reading thread panicked"))??;
    written?;
    Ok(received as f64 / start.elapsed().as_secs_f64() / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcpy_and_a_loopback_stream_are_measured_and_noted() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let limits = Limits::measure(&[64, 4096], ip);
        assert_eq!(limits.memcpy.iter().map(|&(s, _)| s).collect::<Vec<_>>(), [64, 4096]);
        assert!(limits.memcpy.iter().all(|&(_, gb)| gb > 0.0), "{limits:?}");
        assert!(limits.tcp.as_ref().is_ok_and(|&gb| gb > 0.0), "{limits:?}");
        let note = limits.note(ip);
        assert!(note.contains("memcpy GB/s 64 B") && note.contains("4096 B"), "{note}");
        assert!(note.contains("one TCP stream over 127.0.0.1") && note.contains("GB/s."), "{note}");
        assert!(note.lines().all(|l| l.starts_with("# ")), "comment lines only: {note}");
    }
}
