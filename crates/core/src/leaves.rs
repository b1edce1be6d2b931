//! A fast form of the subset comparison in [`crate::diff`]: every leaf of an object (a scalar
//! with the path that leads to it) is hashed into one 64-bit number, arrays also contribute
//! their length, and "desired is a subset of observed" becomes "every leaf of the desired object
//! is among the leaves of the observed one". The desired leaves go into a reused vector; the
//! observed object is walked against them without being stored ([`Comparer`]). No JSON tree is
//! built, which is what keeps a steady cluster's plan in microseconds.
//!
//! The comparison is the same as [`crate::diff::is_subset`]: object keys are part of the path
//! (extra observed keys add leaves nobody asks for), array indexes are part of the path and the
//! length is a leaf of its own (so arrays must have the same length), `null`, empty objects and
//! empty arrays contribute no leaf (so they match an absent field), integers hash by value
//! whatever their width. A changed desired leaf is missed only if it collides with one of the
//! observed object's leaves: about one in 2^53 per comparison with a few thousand leaves (not a
//! cryptographic guarantee; nothing here is a security boundary: whoever can edit an owned
//! object can also edit the cluster), and a miss costs one write skipped until the object
//! changes again.
//!
//! [`hash_parts`] is a separate, 128-bit hash whose values are persisted (the config-hash
//! annotation) and therefore kept stable across releases; the leaf hash is not persisted and
//! may change.

use serde::Serialize;
use serde::ser::{self, Impossible};

/// One leaf: its path and value hashed into 64 bits.
///
/// A desired leaf that changed would have to collide with one of the observed object's leaves
/// (a few thousand) to be missed: about 2^-53 per comparison, and the cost of a miss is one
/// write skipped until the next change of the object.
pub type Leaf = u64;

/// The leaf hashes of `value` in serialization order, or `None` when it cannot be serialized.
pub fn leaves<T: Serialize + ?Sized>(value: &T) -> Option<Vec<Leaf>> {
    let mut out = Vec::new();
    collect_into(value, false, &mut out)?;
    Some(out)
}

/// [`leaves`] of a Kubernetes object, leaving out what the API server owns: the top-level
/// `status` and `metadata.managedFields` (which can be kilobytes when the cache keeps them).
pub fn object_leaves<T: Serialize + ?Sized>(value: &T) -> Option<Vec<Leaf>> {
    let mut out = Vec::new();
    collect_into(value, true, &mut out)?;
    Some(out)
}

fn collect_into<T: Serialize + ?Sized>(
    value: &T,
    skip_server_fields: bool,
    out: &mut Vec<Leaf>,
) -> Option<()> {
    out.clear();
    let mut sink = Sink::Collect(out);
    walk(value, skip_server_fields, &mut sink)
}

fn walk<T: Serialize + ?Sized>(
    value: &T,
    skip_server_fields: bool,
    sink: &mut Sink<'_>,
) -> Option<()> {
    value
        .serialize(Walker {
            path: PATH_ROOT,
            depth: 0,
            skip_server_fields,
            out: sink,
        })
        .ok()
}

/// Where the walk puts each leaf: into a vector, or against the leaves of a desired object,
/// counting how many of them were found in order (so the observed object is never stored).
enum Sink<'d> {
    Collect(&'d mut Vec<Leaf>),
    Match { want: &'d [Leaf], next: usize },
}

impl Sink<'_> {
    #[inline]
    fn push(&mut self, leaf: Leaf) {
        match self {
            Sink::Collect(out) => out.push(leaf),
            Sink::Match { want, next } => {
                if want.get(*next) == Some(&leaf) {
                    *next += 1;
                }
            }
        }
    }
}

/// Compares objects as [`object_is_subset`] does, keeping its buffers between comparisons: one
/// planning pass compares seven objects, and allocating (then freeing) kilobytes of leaves for
/// each of them cost more than hashing them.
#[derive(Debug, Default)]
pub struct Comparer {
    desired: Vec<Leaf>,
    observed: Vec<Leaf>,
}

impl Comparer {
    /// Whether every leaf of `desired` is a leaf of `observed`, both Kubernetes objects
    /// (server-owned fields left out as in [`object_leaves`]); `None` when either cannot be
    /// serialized.
    ///
    /// The observed object is first walked against the desired leaves in order, storing
    /// nothing: values of the same type serialize their fields in the same order, so a subset is
    /// normally also a subsequence. Only when that fails are its leaves collected, sorted and
    /// searched.
    pub fn object_is_subset<A, B>(&mut self, desired: &A, observed: &B) -> Option<bool>
    where
        A: Serialize + ?Sized,
        B: Serialize + ?Sized,
    {
        self.load_desired(desired)?;
        self.desired_is_subset_of(observed)
    }

    /// Hashes the leaves of the desired object `desired` (server-owned fields left out) for
    /// [`Comparer::desired_is_subset_of`], and returns their digest: one 64-bit hash of all of
    /// them in order.
    pub fn load_desired<A: Serialize + ?Sized>(&mut self, desired: &A) -> Option<u64> {
        collect_into(desired, true, &mut self.desired)?;
        Some(fold(&self.desired))
    }

    /// Whether every leaf of the desired object last given to [`Comparer::load_desired`] is a
    /// leaf of `observed`; `None` when `observed` cannot be serialized.
    pub fn desired_is_subset_of<B: Serialize + ?Sized>(&mut self, observed: &B) -> Option<bool> {
        let mut matcher = Sink::Match {
            want: &self.desired,
            next: 0,
        };
        walk(observed, true, &mut matcher)?;
        if let Sink::Match { want, next } = matcher
            && next == want.len()
        {
            return Some(true);
        }
        collect_into(observed, true, &mut self.observed)?;
        Some(is_subset(&self.desired, &mut self.observed))
    }
}

/// A 64-bit digest of `value`: its leaves folded in order (`0` if it cannot be serialized).
pub fn digest<T: Serialize + ?Sized>(value: &T) -> u64 {
    let mut leaves = Vec::new();
    match collect_into(value, false, &mut leaves) {
        Some(()) => fold(&leaves),
        None => 0,
    }
}

/// One 64-bit hash of `leaves` in order.
fn fold(leaves: &[Leaf]) -> u64 {
    let folded = leaves
        .iter()
        .fold(P2, |state, leaf| mum(state ^ leaf ^ P1, P0 ^ leaf));
    mum(folded ^ P2, leaves.len() as u64 ^ P1)
}

/// [`Comparer::object_is_subset`] without keeping the buffers.
pub fn object_is_subset<A, B>(desired: &A, observed: &B) -> Option<bool>
where
    A: Serialize + ?Sized,
    B: Serialize + ?Sized,
{
    Comparer::default().object_is_subset(desired, observed)
}

/// Whether every leaf of `desired` is a leaf of `observed`.
///
/// Values of the same type serialize their fields in the same order (struct fields in
/// declaration order, maps sorted), so a subset is normally also a subsequence, checked in one
/// pass; otherwise `observed` is sorted in place and searched.
pub fn is_subset(desired: &[Leaf], observed: &mut [Leaf]) -> bool {
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
#[inline]
fn child(parent: u64, tag: u8, key: &[u8]) -> u64 {
    mix(parent, tag, key)
}

/// A leaf: the path and the value.
#[inline]
fn leaf(path: u64, tag: u8, bytes: &[u8]) -> u64 {
    mix(path, 0xf0 | tag, bytes)
}

// The leaf hash: wyhash's construction (a 64x64->128-bit multiply folded to 64 bits), reading
// short inputs with overlapping loads instead of copying them. Leaves live only for one
// comparison, so unlike `hash_parts` this hash may change between releases.
const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
const PATH_ROOT: u64 = 0x589_965c_c753_74cc;

/// Multiplies and folds the 128-bit product: every input bit reaches every output bit.
#[inline]
fn mum(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

#[inline]
fn read8(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[inline]
fn read4(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u64::from(u32::from_le_bytes(word))
}

/// Hashes `bytes` (with their length and a tag) into `state`.
#[inline]
fn mix(state: u64, tag: u8, bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let mut seed = state ^ P0 ^ (u64::from(tag) << 56) ^ len as u64;
    let (a, b) = if len <= 16 {
        if len >= 4 {
            let quarter = (len >> 3) << 2;
            (
                (read4(bytes, 0) << 32) | read4(bytes, quarter),
                (read4(bytes, len - 4) << 32) | read4(bytes, len - 4 - quarter),
            )
        } else if len > 0 {
            (
                (u64::from(bytes[0]) << 16)
                    | (u64::from(bytes[len >> 1]) << 8)
                    | u64::from(bytes[len - 1]),
                0,
            )
        } else {
            (0, 0)
        }
    } else {
        let mut at = 0;
        while len - at > 16 {
            seed = mum(read8(bytes, at) ^ P1, read8(bytes, at + 8) ^ seed);
            at += 16;
        }
        (read8(bytes, len - 16), read8(bytes, len - 8))
    };
    mum(P1 ^ len as u64, mum(a ^ P1, b ^ seed) ^ P2)
}

/// Why a value could not be walked (a map key that is not a string, and the like).
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

struct Walker<'a, 'd> {
    path: u64,
    /// Nesting depth of the value: 0 for the object itself.
    depth: u32,
    skip_server_fields: bool,
    out: &'a mut Sink<'d>,
}

impl Walker<'_, '_> {
    fn push(self, tag: u8, bytes: &[u8]) -> Result<(), Error> {
        self.out.push(leaf(self.path, tag, bytes));
        Ok(())
    }

    fn int(self, v: i128) -> Result<(), Error> {
        self.push(1, &v.to_le_bytes())
    }
}

impl<'a, 'd> ser::Serializer for Walker<'a, 'd> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a, 'd>;
    type SerializeTuple = Seq<'a, 'd>;
    type SerializeTupleStruct = Seq<'a, 'd>;
    type SerializeTupleVariant = Seq<'a, 'd>;
    type SerializeMap = Map<'a, 'd>;
    type SerializeStruct = Map<'a, 'd>;
    type SerializeStructVariant = Map<'a, 'd>;

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
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a, 'd>, Error> {
        Ok(Seq {
            path: self.path,
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            index: 0,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a, 'd>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'a, 'd>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a, 'd>, Error> {
        Ok(Seq {
            path: child(self.path, b'k', variant.as_bytes()),
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            index: 0,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a, 'd>, Error> {
        Ok(Map {
            path: self.path,
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Map<'a, 'd>, Error> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Map<'a, 'd>, Error> {
        Ok(Map {
            path: child(self.path, b'k', variant.as_bytes()),
            depth: self.depth,
            skip_server_fields: self.skip_server_fields,
            out: self.out,
            key: None,
        })
    }
}

struct Seq<'a, 'd> {
    path: u64,
    depth: u32,
    skip_server_fields: bool,
    out: &'a mut Sink<'d>,
    index: u64,
}

impl Seq<'_, '_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        // An index is a number: one multiply extends the path.
        let path = mum(self.path ^ P0, self.index ^ P2);
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

impl ser::SerializeSeq for Seq<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTuple for Seq<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Seq<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Seq<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

struct Map<'a, 'd> {
    path: u64,
    depth: u32,
    skip_server_fields: bool,
    out: &'a mut Sink<'d>,
    key: Option<u64>,
}

impl Map<'_, '_> {
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

impl ser::SerializeMap for Map<'_, '_> {
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

impl ser::SerializeStruct for Map<'_, '_> {
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

impl ser::SerializeStructVariant for Map<'_, '_> {
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
    parent: u64,
}

impl ser::Serializer for KeyHasher {
    type Ok = u64;
    type Error = Error;
    type SerializeSeq = Impossible<u64, Error>;
    type SerializeTuple = Impossible<u64, Error>;
    type SerializeTupleStruct = Impossible<u64, Error>;
    type SerializeTupleVariant = Impossible<u64, Error>;
    type SerializeMap = Impossible<u64, Error>;
    type SerializeStruct = Impossible<u64, Error>;
    type SerializeStructVariant = Impossible<u64, Error>;

    fn serialize_str(self, v: &str) -> Result<u64, Error> {
        Ok(child(self.parent, b'k', v.as_bytes()))
    }
    fn serialize_bool(self, v: bool) -> Result<u64, Error> {
        self.serialize_str(if v { "true" } else { "false" })
    }
    fn serialize_i8(self, v: i8) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<u64, Error> {
        self.serialize_str(&v.to_string())
    }
    fn serialize_f32(self, _: f32) -> Result<u64, Error> {
        Err(Error("float map key".into()))
    }
    fn serialize_f64(self, _: f64) -> Result<u64, Error> {
        Err(Error("float map key".into()))
    }
    fn serialize_char(self, v: char) -> Result<u64, Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<u64, Error> {
        Err(Error("bytes map key".into()))
    }
    fn serialize_none(self) -> Result<u64, Error> {
        Err(Error("empty map key".into()))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<u64, Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<u64, Error> {
        Err(Error("unit map key".into()))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<u64, Error> {
        Err(Error("unit map key".into()))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<u64, Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<u64, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<u64, Error> {
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
            let expected = crate::diff::is_subset(&desired, &observed);
            assert_eq!(
                subset(desired.clone(), observed.clone()),
                expected,
                "{desired} vs {observed}"
            );
            // The streaming comparison (and its sorted fallback) gives the same answer, also
            // with buffers left over from an earlier comparison.
            let mut comparer = Comparer::default();
            assert_eq!(
                comparer.object_is_subset(&json!({"x": [1, 2, 3]}), &json!({})),
                Some(false)
            );
            assert_eq!(
                comparer.object_is_subset(&desired, &observed),
                Some(expected),
                "{desired} vs {observed}, streamed"
            );
        }
    }

    #[test]
    fn a_subset_out_of_order_is_found_by_the_fallback() {
        // A struct serializes its fields in declaration order, a JSON map sorted: the same
        // leaves in another order are not a subsequence, but still a subset.
        let observed = StructAB { b: 2, a: 1, c: 3 };
        assert_eq!(
            object_is_subset(&json!({"a": 1, "b": 2}), &observed),
            Some(true)
        );
        assert_eq!(
            object_is_subset(&json!({"a": 1, "b": 3}), &observed),
            Some(false)
        );
    }

    #[derive(serde::Serialize)]
    struct StructAB {
        b: i32,
        a: i32,
        c: i32,
    }
}
