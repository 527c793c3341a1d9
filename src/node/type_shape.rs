//! The fingerprint of a message type's serde shape: what a typed publisher announces in its
//! accept data and a typed subscription compares, so that a subscriber of another type is
//! refused at connect rather than decoding one type's bytes as another's.
//!
//! The shape is traced without a value: [`Tracer`] is a serde `Deserializer` that hands the
//! type's `Deserialize` a zero of every primitive it asks for, one element of every sequence
//! and map, `Some` of every option and the first variant of every enum (the names of all the
//! variants are part of the shape), and writes down what was asked: the primitives, and the
//! names of structs, their fields and enums. Two types with the same serde shape (the same
//! struct in two crates of two programs) have the same fingerprint; module paths are not part
//! of it. A type whose `Deserialize` refuses the zeros (say `NonZeroU32`), or that is
//! self-describing (`deserialize_any`), has no fingerprint: it is not checked.

use serde::de::value::{Error as TraceError, U32Deserializer};
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use xxhash_rust::xxh64::xxh64;

/// How deep the trace goes into options, sequences and maps before it takes them empty
/// (a recursive type ends there).
const MAX_DEPTH: usize = 16;

/// The fingerprint of `T`'s serde shape, if it can be traced.
pub(crate) fn fingerprint<T: DeserializeOwned>() -> Option<u64> {
    let mut tracer = Tracer { shape: String::new(), depth: 0 };
    T::deserialize(&mut tracer).ok()?;
    Some(xxh64(tracer.shape.as_bytes(), 0))
}

/// Writes down what a type's `Deserialize` asks for.
struct Tracer {
    shape: String,
    depth: usize,
}

impl Tracer {
    fn note(&mut self, token: &str) {
        self.shape.push_str(token);
        self.shape.push(';');
    }

    /// Whether the trace may go one level deeper.
    fn may_descend(&self) -> bool {
        self.depth < MAX_DEPTH
    }
}

/// Hands `len` elements of the tracer to a visitor.
struct Elements<'a> {
    tracer: &'a mut Tracer,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_> {
    type Error = TraceError;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, TraceError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.tracer).map(Some)
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, TraceError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.tracer).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, TraceError> {
        seed.deserialize(&mut *self.tracer)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Tracer {
    type Error = TraceError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), TraceError> {
        let first: U32Deserializer<TraceError> = 0u32.into_deserializer();
        Ok((seed.deserialize(first)?, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Tracer {
    type Error = TraceError;

    fn unit_variant(self) -> Result<(), TraceError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, TraceError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, TraceError> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.note(&fields.join(","));
        visitor.visit_seq(Elements { tracer: self, left: fields.len() })
    }
}

/// A primitive: its name, and a zero of it.
macro_rules! primitive {
    ($($method:ident $visit:ident $zero:expr;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
                self.note(stringify!($method));
                visitor.$visit($zero)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for &mut Tracer {
    type Error = TraceError;

    primitive! {
        deserialize_bool visit_bool false;
        deserialize_i8 visit_i8 0;
        deserialize_i16 visit_i16 0;
        deserialize_i32 visit_i32 0;
        deserialize_i64 visit_i64 0;
        deserialize_i128 visit_i128 0;
        deserialize_u8 visit_u8 0;
        deserialize_u16 visit_u16 0;
        deserialize_u32 visit_u32 0;
        deserialize_u64 visit_u64 0;
        deserialize_u128 visit_u128 0;
        deserialize_f32 visit_f32 0.0;
        deserialize_f64 visit_f64 0.0;
        deserialize_char visit_char '\0';
        deserialize_str visit_str "";
        deserialize_string visit_str "";
        deserialize_bytes visit_bytes &[];
        deserialize_byte_buf visit_bytes &[];
        deserialize_identifier visit_u32 0;
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.note("unit");
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        visitor.visit_unit()
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, TraceError> {
        Err(de::Error::custom("a self-describing type has no fixed shape"))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.note("option");
        if !self.may_descend() {
            return visitor.visit_none();
        }
        self.depth += 1;
        let value = visitor.visit_some(&mut *self);
        self.depth -= 1;
        value
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, TraceError> {
        self.note(name);
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.note(name);
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.note("seq");
        let left = usize::from(self.may_descend());
        self.depth += 1;
        let value = visitor.visit_seq(Elements { tracer: &mut *self, left });
        self.depth -= 1;
        value
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, TraceError> {
        self.note(&format!("tuple{len}"));
        visitor.visit_seq(Elements { tracer: self, left: len })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.note(name);
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.note("map");
        let left = usize::from(self.may_descend());
        self.depth += 1;
        let value = visitor.visit_map(Elements { tracer: &mut *self, left });
        self.depth -= 1;
        value
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.note(name);
        self.note(&fields.join(","));
        visitor.visit_seq(Elements { tracer: self, left: fields.len() })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.note(name);
        self.note(&variants.join("|"));
        if !self.may_descend() {
            return Err(de::Error::custom("a recursive enum is too deep to trace"));
        }
        self.depth += 1;
        let value = visitor.visit_enum(&mut *self);
        self.depth -= 1;
        value
    }

    fn is_human_readable(&self) -> bool {
        // As the codec (bincode) is not.
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Quote {
        symbol: String,
        price: f64,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct QuoteInCents {
        symbol: String,
        cents: u64,
    }

    mod elsewhere {
        /// The same struct, defined in another module (as another program would).
        #[derive(serde::Serialize, serde::Deserialize)]
        pub struct Quote {
            pub symbol: String,
            pub price: f64,
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    enum Tree {
        Leaf(u32),
        Node(Box<Tree>, Box<Tree>),
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct List {
        value: u8,
        next: Option<Box<List>>,
    }

    #[test]
    fn equal_shapes_have_equal_fingerprints_and_different_shapes_differ() {
        let of = |f: Option<u64>| f.expect("a traceable type");
        assert_eq!(of(fingerprint::<Quote>()), of(fingerprint::<elsewhere::Quote>()), "module paths do not count");
        let distinct = [
            of(fingerprint::<Quote>()),
            of(fingerprint::<QuoteInCents>()),
            of(fingerprint::<String>()),
            of(fingerprint::<Vec<u64>>()),
            of(fingerprint::<Vec<u32>>()),
            of(fingerprint::<(String, u32)>()),
            of(fingerprint::<HashMap<String, u64>>()),
            of(fingerprint::<Option<u64>>()),
            of(fingerprint::<u64>()),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(a, b, "{distinct:x?}");
            }
        }
    }

    #[test]
    fn recursive_types_are_traced_to_a_bound_and_untraceable_ones_have_none() {
        assert!(fingerprint::<List>().is_some());
        assert!(fingerprint::<Vec<Vec<Vec<u8>>>>().is_some());
        // The first variant is traced; a tree whose first variant is a leaf ends.
        assert!(fingerprint::<Tree>().is_some());
        assert!(fingerprint::<std::num::NonZeroU32>().is_none(), "zero is refused: no fingerprint");
    }
}
