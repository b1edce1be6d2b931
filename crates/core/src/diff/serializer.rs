//! The serde serializer that walks a value into its leaves ([`super::leaves`]): each scalar
//! becomes one leaf hashed with its path, each array also contributes its length.

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::leaves::{Sink, child, leaf};
use crate::hash::{P0, P2, mum};

/// Why a value could not be walked (a map key that is not a string, and the like).
#[derive(Debug)]
pub(crate) struct Error(String);

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

pub(super) struct Walker<'a, 'd> {
    pub(super) path: u64,
    /// Nesting depth of the value: 0 for the object itself.
    pub(super) depth: u32,
    pub(super) skip_server_fields: bool,
    pub(super) out: &'a mut Sink<'d>,
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

pub(super) struct Seq<'a, 'd> {
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

/// The four sequence-like serde traits, all one [`Seq`]: `$trait` with its element method.
macro_rules! seq_like {
    ($($trait:ident :: $method:ident),+ $(,)?) => {$(
        impl ser::$trait for Seq<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.finish()
            }
        }
    )+};
}

seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

pub(super) struct Map<'a, 'd> {
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

/// The two struct-like serde traits, both one [`Map`] keyed by field name.
macro_rules! struct_like {
    ($($trait:ident),+) => {$(
        impl ser::$trait for Map<'_, '_> {
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
    )+};
}

struct_like!(SerializeStruct, SerializeStructVariant);

/// Hashes a map key (a string in every Kubernetes type) into the child path, as a struct field
/// name would be.
pub(super) struct KeyHasher {
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
