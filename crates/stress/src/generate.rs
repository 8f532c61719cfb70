//! Deterministic keys and values, shaped like cassandra-stress's.
//!
//! Every value is a pure function of a seed (the partition's population value) and a salt (the
//! column's name), so reads and validation can regenerate what a write sent. The bit patterns are
//! not Java's (cassandra-stress draws from commons-math's Well19937c); the shapes are: a
//! `standard1` key is 10 ASCII characters, one per 4-bit nibble written as `'0' + v` below ten
//! and `'A' + v` above (cassandra-stress's `HexBytes`, hence keys such as `O825P8KK10`), and
//! each cell is `size` random bytes (`FIXED(34)` by default).

use scylla::frame::response::result::{ColumnType, NativeType};
use scylla::value::{CqlDate, CqlTime, CqlTimestamp, CqlTimeuuid, CqlValue};

use crate::distribution::{Distribution, Rng, mix64, salt};

/// The partition key of `standard1`/`counter1` for a population seed.
pub fn hex_key(seed: i64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    hex_key_into(seed, size, &mut out);
    out
}

/// [`hex_key`] appended to `out` (no allocation of its own).
pub fn hex_key_into(seed: i64, size: usize, out: &mut Vec<u8>) {
    let mut rng = Rng::new(mix64(seed as u64 ^ key_salt()));
    let end = out.len() + size;
    while out.len() < end {
        // cassandra-stress's identity distribution: uniform(1..100B).
        let mut value = rng.range_inclusive(1, 100_000_000_000) as u64;
        for _ in 0..16 {
            if out.len() == end {
                break;
            }
            let v = (value & 15) as u8;
            out.push(if v < 10 { b'0' + v } else { b'A' + v });
            value >>= 4;
        }
    }
}

fn key_salt() -> u64 {
    static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SALT.get_or_init(|| salt("randomstrkey"))
}

/// A cell of `column` for a population seed: `size` bytes, size drawn per seed.
pub fn cell_bytes(seed: i64, column: &str, size: &Distribution) -> Vec<u8> {
    let mut out = Vec::new();
    cell_bytes_into(seed, salt(column), size, &mut out);
    out
}

/// [`cell_bytes`] appended to `out`, with the column's salt (`salt(column)`) precomputed.
pub fn cell_bytes_into(seed: i64, column_salt: u64, size: &Distribution, out: &mut Vec<u8>) {
    let id = mix64(seed as u64 ^ column_salt);
    let len = size.value_at(0, id).max(0) as usize;
    random_bytes_into(!id, len, out);
}

pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    random_bytes_into(seed, len, &mut out);
    out
}

/// [`random_bytes`] appended to `out`.
pub fn random_bytes_into(seed: u64, len: usize, out: &mut Vec<u8>) {
    let mut rng = Rng::new(seed);
    let end = out.len() + len;
    out.reserve(len + 8);
    while out.len() < end {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(end);
}

const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A typed CQL value for an identity `id` (from the column's population) and size distribution.
pub fn typed_value(typ: &ColumnType<'_>, id: i64, size: &Distribution) -> Result<CqlValue, String> {
    let h = mix64(id as u64);
    let len = || size.value_at(0, h).max(0) as usize;
    let ColumnType::Native(native) = typ else {
        return Err(format!(
            "unsupported column type {typ:?} (only native types)"
        ));
    };
    Ok(match native {
        NativeType::Blob => CqlValue::Blob(random_bytes(h, len())),
        NativeType::Text | NativeType::Ascii => {
            let mut rng = Rng::new(h);
            let s: String = (0..len())
                .map(|_| ALNUM[(rng.next_u64() % ALNUM.len() as u64) as usize] as char)
                .collect();
            if matches!(native, NativeType::Ascii) {
                CqlValue::Ascii(s)
            } else {
                CqlValue::Text(s)
            }
        }
        NativeType::BigInt => CqlValue::BigInt(id),
        NativeType::Counter => CqlValue::BigInt(id),
        NativeType::Int => CqlValue::Int(id as i32),
        NativeType::SmallInt => CqlValue::SmallInt(id as i16),
        NativeType::TinyInt => CqlValue::TinyInt(id as i8),
        NativeType::Double => CqlValue::Double(id as f64),
        NativeType::Float => CqlValue::Float(id as f32),
        NativeType::Boolean => CqlValue::Boolean(id & 1 == 1),
        NativeType::Timestamp => CqlValue::Timestamp(CqlTimestamp(id)),
        NativeType::Date => CqlValue::Date(CqlDate((1u32 << 31).wrapping_add(id as u32 % 36_500))),
        NativeType::Time => CqlValue::Time(CqlTime(id.rem_euclid(86_400_000_000_000))),
        NativeType::Uuid => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&random_bytes(h, 16));
            b[6] = (b[6] & 0x0f) | 0x40;
            b[8] = (b[8] & 0x3f) | 0x80;
            CqlValue::Uuid(uuid_from_bytes(b))
        }
        NativeType::Timeuuid => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&random_bytes(h, 16));
            b[6] = (b[6] & 0x0f) | 0x10;
            b[8] = (b[8] & 0x3f) | 0x80;
            CqlValue::Timeuuid(CqlTimeuuid::from_bytes(b))
        }
        NativeType::Inet => CqlValue::Inet(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
            (h & 0xffff_ffff) as u32,
        ))),
        other => return Err(format!("unsupported column type {other:?}")),
    })
}

fn uuid_from_bytes(b: [u8; 16]) -> uuid::Uuid {
    uuid::Uuid::from_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_look_like_cassandra_stress_keys() {
        let k = hex_key(1, 10);
        assert_eq!(k.len(), 10);
        assert!(
            k.iter()
                .all(|c| c.is_ascii_digit() || (b'K'..=b'P').contains(c)),
            "{k:?}"
        );
        assert_eq!(hex_key(1, 10), k);
        assert_ne!(hex_key(2, 10), k);
        // Distinct seeds give distinct keys (over a small range, no collisions).
        let keys: std::collections::HashSet<_> = (1..10_000).map(|s| hex_key(s, 10)).collect();
        assert_eq!(keys.len(), 9_999);
    }

    #[test]
    fn cells_have_the_requested_size() {
        let d = Distribution::fixed(34);
        let a = cell_bytes(5, "C0", &d);
        assert_eq!(a.len(), 34);
        assert_eq!(a, cell_bytes(5, "C0", &d));
        assert_ne!(a, cell_bytes(5, "C1", &d));
        let u = Distribution::uniform(10, 20);
        for s in 0..100 {
            let n = cell_bytes(s, "C0", &u).len();
            assert!((10..=20).contains(&n));
        }
    }

    #[test]
    fn appending_generators_match_the_allocating_ones() {
        // The key and the cells a write appends into one buffer are the very bytes a read
        // regenerates (and that earlier versions wrote), whatever precedes them.
        let d = Distribution::uniform(0, 40);
        let mut buf = b"prefix".to_vec();
        for seed in 0..200 {
            let start = buf.len();
            hex_key_into(seed, 10, &mut buf);
            assert_eq!(&buf[start..], &hex_key(seed, 10)[..]);
            let start = buf.len();
            cell_bytes_into(seed, crate::distribution::salt("C3"), &d, &mut buf);
            assert_eq!(&buf[start..], &cell_bytes(seed, "C3", &d)[..]);
        }
        assert!(buf.starts_with(b"prefix"));
        // Pinned bytes (what the generators produced before they appended into buffers):
        // changing a generator would make data written earlier fail validation.
        assert_eq!(hex_key(1, 10), b"K873P46OL0");
        assert_eq!(
            cell_bytes(7, "C0", &Distribution::fixed(34)),
            [
                149, 42, 64, 236, 159, 12, 205, 158, 131, 161, 72, 234, 88, 69, 34, 145, 186, 171,
                153, 105, 226, 67, 31, 182, 185, 128, 204, 10, 38, 22, 156, 5, 78, 248
            ]
        );
    }

    #[test]
    fn typed_values() {
        let size = Distribution::uniform(10, 20);
        let t = typed_value(&ColumnType::Native(NativeType::Text), 3, &size).unwrap();
        assert!(matches!(t, CqlValue::Text(ref s) if (10..=20).contains(&s.len())));
        assert_eq!(
            typed_value(&ColumnType::Native(NativeType::BigInt), 42, &size).unwrap(),
            CqlValue::BigInt(42)
        );
        assert_eq!(
            typed_value(&ColumnType::Native(NativeType::Double), 7, &size).unwrap(),
            CqlValue::Double(7.0)
        );
        let b = typed_value(
            &ColumnType::Native(NativeType::Blob),
            1,
            &Distribution::fixed(16),
        );
        assert!(matches!(b, Ok(CqlValue::Blob(ref v)) if v.len() == 16));
    }
}
