//! A fast form of the subset comparison in [`crate::diff`]: every leaf of an object (a scalar
//! with the path that leads to it) is hashed into one 128-bit number, arrays also contribute
//! their length, and "desired is a subset of observed" becomes "every leaf of the desired object
//! is among the leaves of the observed one". Serializing through this module allocates one vector
//! of numbers instead of a JSON tree, which is what keeps a steady cluster's plan in
//! microseconds.
//!
//! The comparison is the same as [`crate::diff::is_subset`]: object keys are part of the path
//! (extra observed keys add leaves nobody asks for), array indexes are part of the path and the
//! length is a leaf of its own (so arrays must have the same length), `null`, empty objects and
//! empty arrays contribute no leaf (so they match an absent field), integers hash by value
//! whatever their width. Two different leaves hashing alike would need a collision of two
//! independent 64-bit hashes (not a cryptographic guarantee; nothing here is a security
//! boundary: whoever can edit an owned object can also edit the cluster).

use serde::Serialize;
use serde::ser::{self, Impossible};

/// The leaf hashes of `value` in serialization order, or `None` when it cannot be serialized.
pub fn leaves<T: Serialize + ?Sized>(value: &T) -> Option<Vec<u128>> {
    collect(value, false)
}

/// [`leaves`] of a Kubernetes object, leaving out what the API server owns: the top-level
/// `status` and `metadata.managedFields` (which can be kilobytes when the cache keeps them).
pub fn object_leaves<T: Serialize + ?Sized>(value: &T) -> Option<Vec<u128>> {
    collect(value, true)
}

fn collect<T: Serialize + ?Sized>(value: &T, skip_server_fields: bool) -> Option<Vec<u128>> {
    let mut out = Vec::with_capacity(1024);
    let walker = Walker {
        path: ROOT,
        depth: 0,
        skip_server_fields,
        out: &mut out,
    };
    value.serialize(walker).ok()?;
    Some(out)
}

/// Whether every leaf of `desired` is a leaf of `observed`.
///
/// Values of the same type serialize their fields in the same order (struct fields in
/// declaration order, maps sorted), so a subset is normally also a subsequence, checked in one
/// pass; otherwise `observed` is sorted in place and searched.
pub fn is_subset(desired: &[u128], observed: &mut [u128]) -> bool {
    let mut rest = observed.iter();
    if desired.iter().all(|leaf| rest.any(|h| h == leaf)) {
        return true;
    }
    observed.sort_unstable();
    desired
        .iter()
        .all(|leaf| observed.binary_search(leaf).is_ok())
}

const ROOT: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;

/// splitmix64's finalizer: every input bit affects every output bit.
fn avalanche(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Absorbs `bytes` (and their length, and a tag) into two 64-bit lanes, eight bytes at a time
/// (the scripts in the ConfigMap are kilobytes; hashing them byte by byte dominated a pass).
fn absorb(state: u128, tag: u8, bytes: &[u8]) -> u128 {
    let (mut a, mut b) = (
        (state >> 64) as u64 ^ u64::from(tag),
        state as u64 ^ (u64::from(tag) << 56),
    );
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(word); // chunks_exact yields exactly 8 bytes
        let w = u64::from_le_bytes(buf);
        a = (a ^ w).wrapping_mul(K1).rotate_left(31);
        b = (b ^ w.rotate_left(23)).wrapping_mul(K2).rotate_left(29);
    }
    let rest = words.remainder();
    let mut buf = [0u8; 8];
    buf[..rest.len()].copy_from_slice(rest);
    let w = u64::from_le_bytes(buf) ^ ((bytes.len() as u64) << 3);
    a = (a ^ w).wrapping_mul(K1).rotate_left(31);
    b = (b ^ w.rotate_left(23)).wrapping_mul(K2).rotate_left(29);
    (u128::from(a) << 64) | u128::from(b)
}

/// The final form of a state: both lanes avalanched, each depending on the other.
fn finish(state: u128) -> u128 {
    let (a, b) = ((state >> 64) as u64, state as u64);
    let a = avalanche(a ^ b.rotate_left(32));
    let b = avalanche(b ^ a);
    (u128::from(a) << 64) | u128::from(b)
}

/// A 128-bit hash of `parts` in order (each part's length included, so part boundaries count).
/// Deterministic across runs, platforms and releases of this crate.
pub fn hash_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u128 {
    finish(
        parts
            .into_iter()
            .fold(ROOT, |state, part| absorb(state, 0x70, part)),
    )
}

/// The path of a child: the parent's path extended by a tag and the key or index.
fn child(parent: u128, tag: u8, key: &[u8]) -> u128 {
    absorb(parent, tag, key)
}

/// A leaf: the path and the value, finished.
fn leaf(path: u128, tag: u8, bytes: &[u8]) -> u128 {
    finish(absorb(path, 0xf0 | tag, bytes))
}

#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

struct Walker<'a> {
    path: u128,
    /// Nesting depth of the value: 0 for the object itself.
    depth: u32,
    skip_server_fields: bool,
    out: &'a mut Vec<u128>,
}

impl Walker<'_> {
    fn push(self, tag: u8, bytes: &[u8]) -> Result<(), Error> {
        self.out.push(leaf(self.path, tag, bytes));
        Ok(())
    }

    fn int(self, v: i128) -> Result<(), Error> {
        self.push(1, &v.to_le_bytes())
    }
}

impl<'a> ser::Serializer for Walker<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Map<'a>;
    type SerializeStructVariant = Map<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.push(0, &[u8::from(v)])
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.int(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.int(v.into())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        // Integral floats compare equal to integers, as in JSON.
        if v.fract() == 0.0 && v.abs() < 1e30 {
            self.int(v as i128)
        } else {
            self.push(2, &v.to_bits().to_le_bytes())
        }
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.push(3, v.encode_utf8(&mut [0; 4]).as_bytes())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.push(3, v.as_bytes())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        self.push(4, v)
    }
    fn serialize_none(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(Walker {
            path: child(self.path, b'k', variant.as_bytes()),
            depth: self.depth + 1,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
        })
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Error> {
        Ok(Seq {
            path: self.path,
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            index: 0,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Error> {
        Ok(Seq {
            path: child(self.path, b'k', variant.as_bytes()),
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            index: 0,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a>, Error> {
        Ok(Map {
            path: self.path,
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Map<'a>, Error> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Map<'a>, Error> {
        Ok(Map {
            path: child(self.path, b'k', variant.as_bytes()),
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            key: None,
        })
    }
}

pub struct Seq<'a> {
    path: u128,
    depth: u32,
    skip_server_fields: bool,
    out: &'a mut Vec<u128>,
    index: u64,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let path = child(self.path, b'i', &self.index.to_le_bytes());
        self.index += 1;
        value.serialize(Walker {
            path,
            depth: self.depth + 1,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
        })
    }

    fn finish(self) -> Result<(), Error> {
        if self.index > 0 {
            self.out.push(leaf(self.path, 5, &self.index.to_le_bytes()));
        }
        Ok(())
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

pub struct Map<'a> {
    path: u128,
    depth: u32,
    skip_server_fields: bool,
    out: &'a mut Vec<u128>,
    key: Option<u128>,
}

impl Map<'_> {
    fn field<T: Serialize + ?Sized>(&mut self, key: &[u8], value: &T) -> Result<(), Error> {
        if self.skip_server_fields
            && ((self.depth == 0 && key == b"status")
                || (self.depth == 1 && key == b"managedFields"))
        {
            return Ok(());
        }
        value.serialize(Walker {
            path: child(self.path, b'k', key),
            depth: self.depth + 1,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
        })
    }
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key = Some(key.serialize(KeyHasher { parent: self.path })?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let path = self
            .key
            .take()
            .ok_or_else(|| Error("map value without a key".into()))?;
        value.serialize(Walker {
            path,
            depth: self.depth + 1,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
        })
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStruct for Map<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key.as_bytes(), value)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Map<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key.as_bytes(), value)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

/// Hashes a map key (a string in every Kubernetes type) into the child path, as a struct field
/// name would be.
struct KeyHasher {
    parent: u128,
}

impl ser::Serializer for KeyHasher {
    type Ok = u128;
    type Error = Error;
    type SerializeSeq = Impossible<u128, Error>;
    type SerializeTuple = Impossible<u128, Error>;
    type SerializeTupleStruct = Impossible<u128, Error>;
    type SerializeTupleVariant = Impossible<u128, Error>;
    type SerializeMap = Impossible<u128, Error>;
    type SerializeStruct = Impossible<u128, Error>;
    type SerializeStructVariant = Impossible<u128, Error>;

    fn serialize_str(self, v: &str) -> Result<u128, Error> {
        Ok(child(self.parent, b'k', v.as_bytes()))
    }
    fn serialize_bool(self, v: bool) -> Result<u128, Error> {
        self.serialize_str(if v { "true" } else { "false" })
    }
    fn serialize_i8(self, v: i8) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<u128, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_f32(self, _: f32) -> Result<u128, Error> {
        Err(Error("float map key".into()))
    }
    fn serialize_f64(self, _: f64) -> Result<u128, Error> {
        Err(Error("float map key".into()))
    }
    fn serialize_char(self, v: char) -> Result<u128, Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<u128, Error> {
        Err(Error("bytes map key".into()))
    }
    fn serialize_none(self) -> Result<u128, Error> {
        Err(Error("empty map key".into()))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<u128, Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<u128, Error> {
        Err(Error("unit map key".into()))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<u128, Error> {
        Err(Error("unit map key".into()))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<u128, Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<u128, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<u128, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        Err(Error("compound map key".into()))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(Error("compound map key".into()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn subset(desired: serde_json::Value, observed: serde_json::Value) -> bool {
        is_subset(&leaves(&desired).unwrap(), &mut leaves(&observed).unwrap())
    }

    #[test]
    fn agrees_with_the_json_comparison() {
        let cases = [
            (
                json!({"a": 1, "b": {"c": "x"}}),
                json!({"a": 1, "b": {"c": "x", "d": 2}, "e": true}),
            ),
            (json!({"a": 1}), json!({"a": 2})),
            (json!({"a": [1, 2]}), json!({"a": [1, 2, 3]})),
            (json!({"a": [{"n": 1}]}), json!({"a": [{"n": 1, "m": 0}]})),
            (json!({"a": [1, 2]}), json!({"a": [2, 1]})),
            (json!({"a": {}, "b": [], "c": null}), json!({})),
            (json!({"a": 1}), json!({"a": 1.0})),
            (json!({"a": "1"}), json!({"a": 1})),
            (json!({"a": {"b": "x"}}), json!({"a": {"c": "x"}})),
            (json!({"a": {"b": "x"}}), json!({"b": {"a": "x"}})),
            (json!({"ab": "c"}), json!({"a": {"b": "c"}})),
            (json!({"a": true}), json!({"a": 1})),
        ];
        for (desired, observed) in cases {
            assert_eq!(
                subset(desired.clone(), observed.clone()),
                crate::diff::is_subset(&desired, &observed),
                "{desired} vs {observed}"
            );
        }
    }
}
