//! What a typed handle carries: raw bytes (`[u8]`, the default) or any serde type, encoded
//! with the crate's one codec configuration (bincode 2, standard: little-endian varints). The
//! codec stays inside the crate: publishers and subscriptions of one type agree by
//! construction, and raw bytes cost no encoding at all. A typed publisher announces what its
//! type is (a fingerprint of its serde shape, `type_shape.rs`, or a schema id the application
//! gives, and its name); a typed subscription of another type refuses it at connect.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::type_shape;
use crate::error::{Error, Result};
use rdma_wire::protocol::MessageTypeTag;

/// A type messages of a [`Publisher`](crate::Publisher) or [`Subscription`](crate::Subscription)
/// have: `[u8]` (raw bytes, the default) or any `Serialize + DeserializeOwned` type. Implemented
/// by the crate for both; there is nothing to implement.
///
/// The codec is bincode 2's standard configuration (little-endian, varint integers): a
/// program in another language reads and writes these bytes with a bincode 2 implementation,
/// or publishes and subscribes raw bytes.
///
/// Types are checked at connect: a typed publisher announces a 64-bit fingerprint of its
/// type's serde shape (struct and field names, enum variants, primitives; not the module
/// path, so the same struct defined in two programs matches) or the schema id its application
/// gave ([`PublisherBuilder::schema_id`](crate::PublisherBuilder::schema_id)), with the
/// type's name. A typed subscription whose fingerprint differs refuses the publisher:
/// [`Error::Rejected`] with [`RejectCode::TypeMismatch`](crate::RejectCode::TypeMismatch)
/// naming both types, at the receive call. A raw subscription (`[u8]`) reads any publisher; a
/// raw publisher's messages are not checked.
pub trait MessageType: private::Sealed {
    /// What a subscription delivers: `Vec<u8>` for raw bytes, the value itself for a serde type.
    type Owned;

    /// What a publisher of this type announces, and a subscription compares: `None` for raw
    /// bytes (or a type whose shape cannot be traced); `schema_id` replaces the fingerprint.
    #[doc(hidden)]
    fn type_tag(schema_id: Option<u64>) -> Option<MessageTypeTag>;

    /// The bytes of a raw message as they are (no encoding), `None` for a serde value.
    #[doc(hidden)]
    fn as_raw(value: &Self) -> Option<&[u8]>;

    /// The encoded length of `value`.
    #[doc(hidden)]
    fn encoded_len(value: &Self) -> Result<usize>;

    /// Encodes `value` into `out`, exactly [`encoded_len`](Self::encoded_len) bytes.
    #[doc(hidden)]
    fn encode_into(value: &Self, out: &mut [u8]) -> Result<()>;

    /// Decodes a delivered message that is borrowed.
    #[doc(hidden)]
    fn decode(bytes: &[u8]) -> Result<Self::Owned>;

    /// Decodes a delivered message that is owned already (raw bytes: no copy).
    #[doc(hidden)]
    fn decode_vec(bytes: Vec<u8>) -> Result<Self::Owned>;
}

impl MessageType for [u8] {
    type Owned = Vec<u8>;
    fn type_tag(_: Option<u64>) -> Option<MessageTypeTag> {
        None
    }
    fn as_raw(value: &Self) -> Option<&[u8]> {
        Some(value)
    }
    fn encoded_len(value: &Self) -> Result<usize> {
        Ok(value.len())
    }
    fn encode_into(value: &Self, out: &mut [u8]) -> Result<()> {
        out.copy_from_slice(value);
        Ok(())
    }
    fn decode(bytes: &[u8]) -> Result<Vec<u8>> {
        Ok(bytes.to_vec())
    }
    fn decode_vec(bytes: Vec<u8>) -> Result<Vec<u8>> {
        Ok(bytes)
    }
}

impl<T: Serialize + DeserializeOwned> MessageType for T {
    type Owned = T;
    fn type_tag(schema_id: Option<u64>) -> Option<MessageTypeTag> {
        let fingerprint = schema_id.or_else(type_shape::fingerprint::<T>)?;
        Some(MessageTypeTag::new(fingerprint, std::any::type_name::<T>()))
    }
    fn as_raw(_: &Self) -> Option<&[u8]> {
        None
    }
    fn encoded_len(value: &Self) -> Result<usize> {
        let mut size = bincode::enc::write::SizeWriter::default();
        bincode::serde::encode_into_writer(value, &mut size, config()).map_err(encode_error)?;
        Ok(size.bytes_written)
    }
    fn encode_into(value: &Self, out: &mut [u8]) -> Result<()> {
        let written = bincode::serde::encode_into_slice(value, out, config()).map_err(encode_error)?;
        if written != out.len() {
            return Err(Error::Encode { detail: format!("encoded {written} bytes, {} expected", out.len()) });
        }
        Ok(())
    }
    fn decode(bytes: &[u8]) -> Result<T> {
        let (value, read) = bincode::serde::decode_from_slice(bytes, config())
            .map_err(|e| decode_error(format!("{e} ({} bytes)", bytes.len())))?;
        if read != bytes.len() {
            return Err(decode_error(format!("{} bytes left after the value", bytes.len() - read)));
        }
        Ok(value)
    }
    fn decode_vec(bytes: Vec<u8>) -> Result<T> {
        Self::decode(&bytes)
    }
}

/// The crate's one codec configuration.
fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

fn encode_error(e: bincode::error::EncodeError) -> Error {
    Error::Encode { detail: e.to_string() }
}

/// A message that does not decode; the subscription names its publisher and sequence when it
/// delivers the error.
fn decode_error(detail: String) -> Error {
    Error::Decode { publisher: 0, seq: 0, detail }
}

mod private {
    /// Only the crate implements [`MessageType`](super::MessageType).
    pub trait Sealed {}
    impl Sealed for [u8] {}
    impl<T: serde::Serialize + serde::de::DeserializeOwned> Sealed for T {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Quote {
        symbol: String,
        price: f64,
    }

    #[test]
    fn a_value_round_trips_through_its_exact_length() {
        let q = Quote { symbol: "ABC".into(), price: 1.5 };
        let mut out = vec![0; Quote::encoded_len(&q).unwrap()];
        Quote::encode_into(&q, &mut out).unwrap();
        assert_eq!(Quote::decode(&out).unwrap(), q);
        assert!(matches!(Quote::decode(&out[..out.len() - 1]), Err(Error::Decode { .. })));
        let mut longer = out.clone();
        longer.push(0);
        assert!(matches!(Quote::decode(&longer), Err(Error::Decode { .. })), "trailing bytes are an error");
    }

    #[test]
    fn raw_bytes_are_not_encoded() {
        assert_eq!(<[u8]>::as_raw(b"abc"), Some(&b"abc"[..]));
        assert_eq!(<[u8]>::decode_vec(b"abc".to_vec()).unwrap(), b"abc");
        assert_eq!(Quote::as_raw(&Quote { symbol: String::new(), price: 0.0 }), None);
    }
}
