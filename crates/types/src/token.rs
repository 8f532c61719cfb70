//! Murmur3Partitioner tokens and ScyllaDB's token → shard mapping.

/// The token Cassandra's Murmur3Partitioner assigns to a serialized partition key.
///
/// Cassandra-exact: tail bytes are sign-extended (Java `(long) byte`), `i64::MIN` is
/// normalized to `i64::MAX`, and the empty key maps to `i64::MIN`.
pub fn murmur3_token(key: &[u8]) -> i64 {
    if key.is_empty() {
        return i64::MIN;
    }
    let h1 = murmur3_h1(key);
    if h1 == i64::MIN { i64::MAX } else { h1 }
}

const C1: i64 = 0x87c3_7b91_1142_53d5_u64 as i64;
const C2: i64 = 0x4cf5_ad43_2745_937f_u64 as i64;

#[inline]
fn fmix(mut k: i64) -> i64 {
    k ^= ((k as u64) >> 33) as i64;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd_u64 as i64);
    k ^= ((k as u64) >> 33) as i64;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53_u64 as i64);
    k ^= ((k as u64) >> 33) as i64;
    k
}

/// First half of MurmurHash3_x64_128 (seed 0) with Cassandra's signed-tail quirk.
fn murmur3_h1(key: &[u8]) -> i64 {
    let len = key.len();
    let mut h1: i64 = 0;
    let mut h2: i64 = 0;
    let mut chunks = key.chunks_exact(16);
    for block in &mut chunks {
        let mut k1 = i64::from_le_bytes(block[0..8].try_into().unwrap_or([0; 8]));
        let mut k2 = i64::from_le_bytes(block[8..16].try_into().unwrap_or([0; 8]));
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1.rotate_left(27).wrapping_add(h2);
        h1 = h1.wrapping_mul(5).wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2.rotate_left(31).wrapping_add(h1);
        h2 = h2.wrapping_mul(5).wrapping_add(0x3849_5ab5);
    }
    let tail = chunks.remainder();
    let (low, high) = tail.split_at(tail.len().min(8));
    if !high.is_empty() {
        let k2 = signed_tail_word(high)
            .wrapping_mul(C2)
            .rotate_left(33)
            .wrapping_mul(C1);
        h2 ^= k2;
    }
    if !low.is_empty() {
        let k1 = signed_tail_word(low)
            .wrapping_mul(C1)
            .rotate_left(31)
            .wrapping_mul(C2);
        h1 ^= k1;
    }
    h1 ^= len as i64;
    h2 ^= len as i64;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    h1
}

/// The word Cassandra's hash takes from up to eight tail bytes: each byte sign-extended
/// (Java's `(long) byte`), shifted to its place and XORed in, without a loop over the
/// bytes (a third of the hash of a 10-byte key was that loop). A negative byte `i` XORs
/// ones into every bit from `8 * (i + 1)` up; XORed together those runs are the prefix
/// XOR of the bits where they start.
#[inline]
fn signed_tail_word(bytes: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    let v = u64::from_le_bytes(b);
    // Each sign bit moved to the lowest bit of the next byte (the eighth byte's run would
    // start past the word: dropped).
    let mut x = ((v & 0x8080_8080_8080_8080) >> 7) << 8;
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    (v ^ x) as i64
}

/// The bytes of a partition key as fed to the hash: a single component as is, two or more
/// as `[u16 be len][bytes][0x00]` each (CompositeType legacy encoding).
pub fn serialize_composite_key(components: &[&[u8]]) -> Vec<u8> {
    if components.len() == 1 {
        return components[0].to_vec();
    }
    let mut out = Vec::with_capacity(components.iter().map(|c| c.len() + 3).sum());
    for c in components {
        out.extend_from_slice(&(c.len() as u16).to_be_bytes());
        out.extend_from_slice(c);
        out.push(0);
    }
    out
}

/// Splits a composite key back into components (inverse of [`serialize_composite_key`]
/// for `n >= 2` components). None if the bytes are malformed.
pub fn split_composite_key(key: &[u8], n: usize) -> Option<Vec<&[u8]>> {
    if n == 1 {
        return Some(vec![key]);
    }
    let mut out = Vec::with_capacity(n);
    let mut pos = 0;
    for _ in 0..n {
        let l = key.get(pos..pos + 2)?;
        let l = u16::from_be_bytes([l[0], l[1]]) as usize;
        out.push(key.get(pos + 2..pos + 2 + l)?);
        if key.get(pos + 2 + l) != Some(&0) {
            return None;
        }
        pos += l + 3;
    }
    (pos == key.len()).then_some(out)
}

/// ScyllaDB's biased-token-round-robin: the shard owning `token`.
pub fn shard_of(token: i64, nr_shards: u32, ignore_msb: u32) -> u32 {
    let biased = (token as u64).wrapping_add(1u64 << 63);
    let biased = if ignore_msb >= 64 {
        0
    } else {
        biased << ignore_msb
    };
    (((biased as u128) * (nr_shards as u128)) >> 64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors() {
        assert_eq!(murmur3_token(b"test"), -6017608668500074083);
        assert_eq!(murmur3_token(b"xd"), 4507812186440344727);
        assert_eq!(murmur3_token(b"primary_key"), -1632642444691073360);
        assert_eq!(murmur3_token("kremówki".as_bytes()), 4354931215268080151);
        assert_eq!(murmur3_token(&[0xfe; 8]), -8927430733708461935);
        assert_eq!(murmur3_token(b"123"), -7468325962851647638);
        let k: Vec<u8> = [0x00u8, 0xff, 0x10, 0xfa, 0x99].repeat(10);
        assert_eq!(murmur3_token(&k), 5837342703291459765);
        assert_eq!(murmur3_token(&[0, 0, 0, 1]), -4069959284402364209);
        assert_eq!(murmur3_token(b""), i64::MIN);
    }

    /// The tail as the hash's reference code (and Cassandra) takes it: byte by byte.
    fn signed_tail_bytewise(bytes: &[u8]) -> i64 {
        bytes
            .iter()
            .enumerate()
            .fold(0, |k, (i, b)| k ^ ((*b as i8 as i64) << (8 * i)))
    }

    #[test]
    fn the_tail_word_sign_extends_each_byte() {
        for bytes in [
            &[][..],
            &[0x80],
            &[0x7f, 0x80],
            &[0xff; 8],
            &[0x80, 0, 0x80, 0x01, 0xfe, 0, 0, 0x81],
            &[1, 2, 3, 0x90, 5, 6, 7],
        ] {
            assert_eq!(
                signed_tail_word(bytes),
                signed_tail_bytewise(bytes),
                "{bytes:x?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn tail_words_match_the_bytewise_sign_extension(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=8)
        ) {
            proptest::prop_assert_eq!(signed_tail_word(&bytes), signed_tail_bytewise(&bytes));
        }
    }

    #[test]
    fn composite() {
        let uuid: [u8; 16] = [
            0x43, 0x27, 0x52, 0x9f, 0xb6, 0x45, 0xdd, 0x00, 0xb8, 0x83, 0xec, 0x39, 0xae, 0x44,
            0x8b, 0xb8,
        ];
        let int = 420459i32.to_be_bytes();
        let key = serialize_composite_key(&[&uuid, &int]);
        let mut expect = vec![0x00, 0x10];
        expect.extend(uuid);
        expect.extend([0x00, 0x00, 0x04, 0x00, 0x06, 0x6a, 0x6b, 0x00]);
        assert_eq!(key, expect);
        assert_eq!(murmur3_token(&key), -9223371632693506265);
        assert_eq!(
            split_composite_key(&key, 2).unwrap(),
            vec![&uuid[..], &int[..]]
        );
        assert!(split_composite_key(&key[..5], 2).is_none());
    }

    #[test]
    fn shards() {
        assert_eq!(shard_of(-9219783007514621794, 4, 12), 3);
        assert_eq!(shard_of(9222582454147032830, 4, 12), 3);
        let t = murmur3_token(b"test");
        assert_eq!([2, 4, 8, 12].map(|n| shard_of(t, n, 12)), [1, 3, 6, 9]);
        assert_eq!(shard_of(i64::MIN, 4, 12), 0);
        assert_eq!(shard_of(12345, 1, 12), 0);
    }
}
