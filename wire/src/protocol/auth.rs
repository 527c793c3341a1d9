//! Shared secrets and the message authentication codes made with them (HMAC-SHA256).
//!
//! One [`Secret`] serves several purposes (discovery announcements, topic credentials); each
//! purpose passes its own label, which is MACed first, so a tag made for one purpose never
//! verifies for another.

use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Bytes of a full HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// Fewest bytes a secret may have.
pub const MIN_SECRET_LEN: usize = 16;
/// Most bytes a secret may have (a file holding more is not a secret file).
pub const MAX_SECRET_LEN: usize = 4096;

type HmacSha256 = Hmac<Sha256>;

/// A shared secret (16 to 4096 bytes). Its `Debug` output never shows it, and
/// two are compared in constant time.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Secret {}

/// Why a secret could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// A secret has [`MIN_SECRET_LEN`] to [`MAX_SECRET_LEN`] bytes.
    #[error("a secret of {len} bytes: it must have {min} to {max}")]
    Length {
        /// The bytes given.
        len: usize,
        /// [`MIN_SECRET_LEN`].
        min: usize,
        /// [`MAX_SECRET_LEN`].
        max: usize,
    },
    /// The secret file could not be read, or holds no valid secret.
    #[error("secret file {}: {detail}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong (the operating system's error, or the length rule).
        detail: String,
    },
}

impl Secret {
    /// A secret of `bytes`; fewer than 16 (`MIN_SECRET_LEN`) or more than 4096
    /// (`MAX_SECRET_LEN`) bytes is an error.
    ///
    /// # Errors
    /// [`SecretError::Length`] when `bytes` is shorter than 16 or longer than 4096 bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Secret, SecretError> {
        let bytes = bytes.into();
        if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&bytes.len()) {
            return Err(SecretError::Length { len: bytes.len(), min: MIN_SECRET_LEN, max: MAX_SECRET_LEN });
        }
        Ok(Secret(bytes))
    }

    /// The secret held in the file at `path`, with surrounding ASCII whitespace (a trailing
    /// newline) removed.
    ///
    /// # Errors
    /// [`SecretError::File`] naming the file, with the operating system's error of opening or
    /// reading it, or the length rule when it holds no valid secret.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Secret, SecretError> {
        use std::io::Read;
        let path = path.as_ref();
        let failed = |detail: String| SecretError::File { path: path.to_path_buf(), detail };
        let file = std::fs::File::open(path).map_err(|e| failed(e.to_string()))?;
        let mut bytes = Vec::new();
        // One byte more than allowed tells a too-long file from a full-length one.
        file.take(MAX_SECRET_LEN as u64 + 1).read_to_end(&mut bytes).map_err(|e| failed(e.to_string()))?;
        Secret::new(bytes.trim_ascii().to_vec()).map_err(|e| failed(e.to_string()))
    }

    /// The HMAC-SHA256 of `label` followed by each of `parts`, each preceded by its length (so
    /// that no two different lists of parts MAC the same bytes).
    pub(crate) fn mac(&self, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        for part in std::iter::once(label).chain(parts.iter().copied()) {
            mac.update(&(part.len() as u32).to_le_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` (the first `tag.len()` bytes of the full MAC, at least 16) is the MAC of
    /// `label` and `parts`; compared in constant time.
    pub(crate) fn verify(&self, label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        if !(16..=MAC_LEN).contains(&tag.len()) {
            return false;
        }
        let full = self.mac(label, parts);
        full[..tag.len()].ct_eq(tag).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    #[test]
    fn a_tag_verifies_only_with_its_secret_label_and_parts() {
        let s = secret(1);
        let tag = s.mac(b"label", &[b"ab", b"c"]);
        assert!(s.verify(b"label", &[b"ab", b"c"], &tag));
        assert!(s.verify(b"label", &[b"ab", b"c"], &tag[..16]), "a truncated tag");
        assert!(!s.verify(b"label", &[b"ab", b"c"], &tag[..15]), "too short to be trusted");
        assert!(!secret(2).verify(b"label", &[b"ab", b"c"], &tag), "another secret");
        assert!(!s.verify(b"other", &[b"ab", b"c"], &tag), "another label");
        assert!(!s.verify(b"label", &[b"a", b"bc"], &tag), "the same bytes split otherwise");
        let mut bad = tag;
        bad[31] ^= 1;
        assert!(!s.verify(b"label", &[b"ab", b"c"], &bad));
    }

    #[test]
    fn short_and_long_secrets_are_refused_and_debug_hides_the_bytes() {
        assert_eq!((MIN_SECRET_LEN, MAX_SECRET_LEN), (16, 4096), "the numbers `Secret`'s docs state");
        assert!(Secret::new(vec![0; MIN_SECRET_LEN - 1]).is_err());
        assert!(Secret::new(vec![0; MAX_SECRET_LEN + 1]).is_err());
        assert_eq!(format!("{:?}", secret(0x41)), "Secret(32 bytes)");
    }

    #[test]
    fn a_secret_file_is_read_without_its_trailing_newline() {
        let dir = std::env::temp_dir().join(format!("rdma-pubsub-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        std::fs::write(&path, b"0123456789abcdef-domain\n").unwrap();
        assert_eq!(Secret::from_file(&path).unwrap(), Secret::new(&b"0123456789abcdef-domain"[..]).unwrap());
        std::fs::write(&path, b"short\n").unwrap();
        let short = Secret::from_file(&path).unwrap_err().to_string();
        assert!(short.contains(&path.display().to_string()) && short.contains("5 bytes"), "{short}");
        // A missing file: the error names it.
        let missing = dir.join("no-such-secret");
        let e = Secret::from_file(&missing).unwrap_err();
        assert!(matches!(&e, SecretError::File { path, .. } if *path == missing), "{e:?}");
        assert!(e.to_string().contains("no-such-secret"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
