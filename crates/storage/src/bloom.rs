//! Bloom filter over partition tokens (Filter.db). Versioned, self-contained format:
//! `magic "AMPHBLOM" | version u32 | num_bits u64 | k u32 | bits (u64 LE words) | crc32c`.
//! Bit positions use double hashing of the token (already a Murmur3 hash of the key).

use std::path::Path;

use crate::error::{Result, StorageError};

const MAGIC: &[u8; 8] = b"AMPHBLOM";

#[derive(Debug, Clone)]
pub struct Bloom {
    /// 0 = disabled (always "may contain").
    num_bits: u64,
    k: u32,
    words: Vec<u64>,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The `k` bit positions of `token` in a filter of `num_bits` (> 0) bits.
fn bit_positions(token: i64, k: u32, num_bits: u64) -> impl Iterator<Item = u64> {
    let h1 = token as u64;
    let h2 = mix(h1 ^ 0x9e37_79b9_7f4a_7c15) | 1;
    (0..k as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % num_bits)
}

impl Bloom {
    /// Builds a filter for `tokens` with false-positive chance `fp` (>= 1.0 disables it).
    pub fn build(tokens: &[i64], fp: f64) -> Self {
        if !(fp > 0.0 && fp < 1.0) || tokens.is_empty() {
            return Bloom {
                num_bits: 0,
                k: 0,
                words: Vec::new(),
            };
        }
        let n = tokens.len() as f64;
        let ln2 = std::f64::consts::LN_2;
        let bits = (-(n * fp.ln()) / (ln2 * ln2)).ceil().max(64.0) as u64;
        let k = ((bits as f64 / n) * ln2).round().clamp(1.0, 20.0) as u32;
        let num_bits = bits.div_ceil(64) * 64;
        let mut b = Bloom {
            num_bits,
            k,
            words: vec![0; (num_bits / 64) as usize],
        };
        let (k, words) = (b.k, &mut b.words);
        for t in tokens {
            for bit in bit_positions(*t, k, num_bits) {
                if let Some(w) = words.get_mut((bit / 64) as usize) {
                    *w |= 1 << (bit % 64);
                }
            }
        }
        b
    }

    pub fn may_contain(&self, token: i64) -> bool {
        if self.num_bits == 0 {
            return true;
        }
        bit_positions(token, self.k, self.num_bits).all(|bit| {
            self.words
                .get((bit / 64) as usize)
                .is_some_and(|w| w & (1 << (bit % 64)) != 0)
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut o = MAGIC.to_vec();
        o.extend_from_slice(&1u32.to_le_bytes());
        o.extend_from_slice(&self.num_bits.to_le_bytes());
        o.extend_from_slice(&self.k.to_le_bytes());
        for w in &self.words {
            o.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&o);
        o.extend_from_slice(&crc.to_le_bytes());
        o
    }

    pub fn decode(path: &Path, d: &[u8]) -> Result<Self> {
        if d.len() < 28 {
            return Err(StorageError::corrupt(path, 0, "filter too short"));
        }
        let (body, c) = d.split_at(d.len() - 4);
        let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if crc32c::crc32c(body) != stored {
            return Err(StorageError::corrupt(
                path,
                body.len() as u64,
                "filter checksum mismatch",
            ));
        }
        if &body[0..8] != MAGIC {
            return Err(StorageError::corrupt(path, 0, "bad magic"));
        }
        let num_bits = u64::from_le_bytes([
            body[12], body[13], body[14], body[15], body[16], body[17], body[18], body[19],
        ]);
        let k = u32::from_le_bytes([body[20], body[21], body[22], body[23]]);
        let words: Vec<u64> = body[24..]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .collect();
        if words.len() as u64 * 64 != num_bits || k > 64 {
            return Err(StorageError::corrupt(
                path,
                12,
                "filter size does not match its header",
            ));
        }
        Ok(Bloom { num_bits, k, words })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn false_positive_rate() {
        let toks: Vec<i64> = (0..10_000)
            .map(|i| amphora_types::token::murmur3_token(&(i as u32).to_be_bytes()))
            .collect();
        let b = Bloom::build(&toks, 0.01);
        assert!(toks.iter().all(|t| b.may_contain(*t)));
        let fp = (10_000..110_000)
            .filter(|i| {
                b.may_contain(amphora_types::token::murmur3_token(
                    &(*i as u32).to_be_bytes(),
                ))
            })
            .count();
        assert!(fp < 2000, "false positives {fp} / 100000");
        let d = Bloom::decode(Path::new("x"), &b.encode()).expect("test");
        assert!(toks.iter().all(|t| d.may_contain(*t)));
        let mut enc = b.encode();
        enc[30] ^= 1;
        assert!(Bloom::decode(Path::new("x"), &enc).is_err());
    }
}
