//! A fast form of the subset comparison in [`super`]: every leaf of an object (a scalar
//! with the path that leads to it) is hashed into one 64-bit number, arrays also contribute
//! their length, and "desired is a subset of observed" becomes "every leaf of the desired object
//! is among the leaves of the observed one". The desired leaves go into a reused vector; the
//! observed object is walked against them without being stored ([`Comparer`]). No JSON tree is
//! built, which is what keeps a steady cluster's plan in microseconds.
//!
//! The comparison is the same as [`super::is_subset`]: object keys are part of the path
//! (extra observed keys add leaves nobody asks for), array indexes are part of the path and the
//! length is a leaf of its own (so arrays must have the same length), `null`, empty objects and
//! empty arrays contribute no leaf (so they match an absent field), integers hash by value
//! whatever their width. A changed desired leaf is missed only if it collides with one of the
//! observed object's leaves: about one in 2^53 per comparison with a few thousand leaves (not a
//! cryptographic guarantee; nothing here is a security boundary: whoever can edit an owned
//! object can also edit the cluster), and a miss costs one write skipped until the object
//! changes again.
//!

use serde::Serialize;

use super::serializer::Walker;
use crate::hash::{PATH_ROOT, fold, mix};

/// One leaf: its path and value hashed into 64 bits.
///
/// A desired leaf that changed would have to collide with one of the observed object's leaves
/// (a few thousand) to be missed: about 2^-53 per comparison, and the cost of a miss is one
/// write skipped until the next change of the object.
pub(crate) type Leaf = u64;

/// The leaf hashes of `value` in serialization order, or `None` when it cannot be serialized.
pub(crate) fn leaves<T: Serialize + ?Sized>(value: &T) -> Option<Vec<Leaf>> {
    let mut out = Vec::new();
    collect_into(value, false, &mut out)?;
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
pub(super) enum Sink<'d> {
    Collect(&'d mut Vec<Leaf>),
    Match { want: &'d [Leaf], next: usize },
}

impl Sink<'_> {
    #[inline]
    pub(super) fn push(&mut self, leaf: Leaf) {
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
pub(crate) struct Comparer {
    desired: Vec<Leaf>,
    observed: Vec<Leaf>,
}

impl Comparer {
    /// Whether every leaf of `desired` is a leaf of `observed`, both Kubernetes objects
    /// (server-owned fields left out: the top-level `status` and `metadata.managedFields`); `None` when either cannot be
    /// serialized.
    ///
    /// The observed object is first walked against the desired leaves in order, storing
    /// nothing: values of the same type serialize their fields in the same order, so a subset is
    /// normally also a subsequence. Only when that fails are its leaves collected, sorted and
    /// searched.
    pub(crate) fn object_is_subset<A, B>(&mut self, desired: &A, observed: &B) -> Option<bool>
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
    fn load_desired<A: Serialize + ?Sized>(&mut self, desired: &A) -> Option<u64> {
        collect_into(desired, true, &mut self.desired)?;
        Some(fold(&self.desired))
    }

    /// Whether every leaf of the desired object last given to [`Comparer::load_desired`] is a
    /// leaf of `observed`; `None` when `observed` cannot be serialized.
    fn desired_is_subset_of<B: Serialize + ?Sized>(&mut self, observed: &B) -> Option<bool> {
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
pub(crate) fn digest<T: Serialize + ?Sized>(value: &T) -> u64 {
    let mut leaves = Vec::new();
    match collect_into(value, false, &mut leaves) {
        Some(()) => fold(&leaves),
        None => 0,
    }
}

/// [`Comparer::object_is_subset`] without keeping the buffers.
#[cfg(test)]
fn object_is_subset<A, B>(desired: &A, observed: &B) -> Option<bool>
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
pub(crate) fn is_subset(desired: &[Leaf], observed: &mut [Leaf]) -> bool {
    let mut rest = observed.iter();
    if desired.iter().all(|leaf| rest.any(|h| h == leaf)) {
        return true;
    }
    observed.sort_unstable();
    desired
        .iter()
        .all(|leaf| observed.binary_search(leaf).is_ok())
}

/// The path of a child: the parent's path extended by a tag and the key or index.
#[inline]
pub(super) fn child(parent: u64, tag: u8, key: &[u8]) -> u64 {
    mix(parent, tag, key)
}

/// A leaf: the path and the value.
#[inline]
pub(super) fn leaf(path: u64, tag: u8, bytes: &[u8]) -> u64 {
    mix(path, 0xf0 | tag, bytes)
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
            let expected = super::super::is_subset(&desired, &observed);
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
