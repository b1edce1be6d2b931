//! Hashes: a stable 128-bit hash whose values are persisted, and the fast 64-bit mixing the
//! leaf comparison ([`crate::diff`]) and the render digest are built from.
//!
//! [`hash_parts`] is persisted (the config-hash annotation) and therefore kept stable across
//! releases; the 64-bit hash is not persisted and may change.

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

// The leaf hash: wyhash's construction (a 64x64->128-bit multiply folded to 64 bits), reading
// short inputs with overlapping loads instead of copying them. Leaves live only for one
// comparison, so unlike `hash_parts` this hash may change between releases.
pub(crate) const P0: u64 = 0xa076_1d64_78bd_642f;
pub(crate) const P1: u64 = 0xe703_7ed1_a0b4_28db;
pub(crate) const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
pub(crate) const PATH_ROOT: u64 = 0x589_965c_c753_74cc;

/// Multiplies and folds the 128-bit product: every input bit reaches every output bit.
#[inline]
pub(crate) fn mum(a: u64, b: u64) -> u64 {
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
pub(crate) fn mix(state: u64, tag: u8, bytes: &[u8]) -> u64 {
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

/// One 64-bit hash of `leaves` in order.
pub(crate) fn fold(leaves: &[u64]) -> u64 {
    let folded = leaves
        .iter()
        .fold(P2, |state, leaf| mum(state ^ leaf ^ P1, P0 ^ leaf));
    mum(folded ^ P2, leaves.len() as u64 ^ P1)
}
