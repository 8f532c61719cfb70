//! Arbitrary-precision integers and decimals, just enough for Cassandra's exact
//! `sum`/`avg` over `varint` and `decimal` (Java's BigInteger / BigDecimal semantics:
//! sums keep the largest scale, a decimal average divides with HALF_EVEN rounding at the
//! dividend's scale, a varint average truncates toward zero).

use std::cmp::Ordering;

use bytes::Bytes;

/// A signed integer: sign and magnitude (little-endian base-2^32 limbs, no high zeros).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BigInt {
    negative: bool,
    mag: Vec<u32>,
}

fn trim(v: &mut Vec<u32>) {
    while v.last() == Some(&0) {
        v.pop();
    }
}

fn cmp_mag(a: &[u32], b: &[u32]) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

fn add_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u64;
    for i in 0..a.len().max(b.len()) {
        let s = u64::from(*a.get(i).unwrap_or(&0)) + u64::from(*b.get(i).unwrap_or(&0)) + carry;
        out.push(s as u32);
        carry = s >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    out
}

/// `a - b` for `|a| >= |b|`.
fn sub_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0i64;
    for (i, x) in a.iter().enumerate() {
        let mut d = i64::from(*x) - i64::from(*b.get(i).unwrap_or(&0)) - borrow;
        borrow = 0;
        if d < 0 {
            d += 1 << 32;
            borrow = 1;
        }
        out.push(d as u32);
    }
    trim(&mut out);
    out
}

impl BigInt {
    pub fn zero() -> Self {
        BigInt::default()
    }

    pub fn is_zero(&self) -> bool {
        self.mag.is_empty()
    }

    pub fn from_i64(v: i64) -> Self {
        let m = v.unsigned_abs();
        let mut mag = vec![m as u32, (m >> 32) as u32];
        trim(&mut mag);
        BigInt {
            negative: v < 0 && m != 0,
            mag,
        }
    }

    /// From Java's BigInteger encoding (big-endian two's complement; empty = 0).
    pub fn from_be_bytes(b: &[u8]) -> Self {
        if b.is_empty() {
            return BigInt::zero();
        }
        let negative = b[0] & 0x80 != 0;
        // Magnitude bytes: the value itself, or its two's complement negation.
        let mut bytes: Vec<u8> = b.to_vec();
        if negative {
            for x in &mut bytes {
                *x = !*x;
            }
            for x in bytes.iter_mut().rev() {
                let (v, overflow) = x.overflowing_add(1);
                *x = v;
                if !overflow {
                    break;
                }
            }
        }
        let mut mag = Vec::with_capacity(bytes.len() / 4 + 1);
        for chunk in bytes.rchunks(4) {
            let mut limb = 0u32;
            for x in chunk {
                limb = (limb << 8) | u32::from(*x);
            }
            mag.push(limb);
        }
        trim(&mut mag);
        BigInt {
            negative: negative && !mag.is_empty(),
            mag,
        }
    }

    /// Java's BigInteger.toByteArray: minimal big-endian two's complement.
    pub fn to_be_bytes(&self) -> Vec<u8> {
        let mut bytes: Vec<u8> = Vec::with_capacity(self.mag.len() * 4 + 1);
        for limb in self.mag.iter().rev() {
            bytes.extend_from_slice(&limb.to_be_bytes());
        }
        let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
        let mut bytes = bytes.split_off(first);
        bytes.insert(0, 0);
        if self.negative {
            for x in &mut bytes {
                *x = !*x;
            }
            for x in bytes.iter_mut().rev() {
                let (v, overflow) = x.overflowing_add(1);
                *x = v;
                if !overflow {
                    break;
                }
            }
        }
        // Drop redundant sign bytes.
        while bytes.len() > 1
            && ((bytes[0] == 0 && bytes[1] & 0x80 == 0)
                || (bytes[0] == 0xff && bytes[1] & 0x80 != 0))
        {
            bytes.remove(0);
        }
        bytes
    }

    pub fn add(&self, o: &BigInt) -> BigInt {
        if self.negative == o.negative {
            return BigInt {
                negative: self.negative,
                mag: add_mag(&self.mag, &o.mag),
            };
        }
        match cmp_mag(&self.mag, &o.mag) {
            Ordering::Equal => BigInt::zero(),
            Ordering::Greater => BigInt {
                negative: self.negative,
                mag: sub_mag(&self.mag, &o.mag),
            },
            Ordering::Less => BigInt {
                negative: o.negative,
                mag: sub_mag(&o.mag, &self.mag),
            },
        }
    }

    pub fn neg(&self) -> BigInt {
        BigInt {
            negative: !self.negative && !self.is_zero(),
            mag: self.mag.clone(),
        }
    }

    pub fn sub(&self, o: &BigInt) -> BigInt {
        self.add(&o.neg())
    }

    pub fn mul_small(&self, m: u32) -> BigInt {
        let mut out = Vec::with_capacity(self.mag.len() + 1);
        let mut carry = 0u64;
        for x in &self.mag {
            let p = u64::from(*x) * u64::from(m) + carry;
            out.push(p as u32);
            carry = p >> 32;
        }
        if carry > 0 {
            out.push(carry as u32);
        }
        trim(&mut out);
        BigInt {
            negative: self.negative && !out.is_empty(),
            mag: out,
        }
    }

    /// `self * 10^k`.
    pub fn mul_pow10(&self, k: u32) -> BigInt {
        let mut v = self.clone();
        let mut k = k;
        while k >= 9 {
            v = v.mul_small(1_000_000_000);
            k -= 9;
        }
        if k > 0 {
            v = v.mul_small(10u32.pow(k));
        }
        v
    }

    /// Division of the magnitude by `d` (> 0): quotient (truncated toward zero, with
    /// the sign of `self`) and the magnitude of the remainder.
    pub fn div_small(&self, d: u32) -> (BigInt, u32) {
        let mut q = vec![0u32; self.mag.len()];
        let mut r = 0u64;
        for i in (0..self.mag.len()).rev() {
            let cur = (r << 32) | u64::from(self.mag[i]);
            q[i] = (cur / u64::from(d)) as u32;
            r = cur % u64::from(d);
        }
        trim(&mut q);
        (
            BigInt {
                negative: self.negative && !q.is_empty(),
                mag: q,
            },
            r as u32,
        )
    }

    fn is_odd(&self) -> bool {
        self.mag.first().is_some_and(|x| x & 1 == 1)
    }

    /// `self / d` rounded HALF_EVEN.
    pub fn div_half_even(&self, d: u32) -> BigInt {
        let (q, r) = self.div_small(d);
        let twice = u64::from(r) * 2;
        let up = match twice.cmp(&u64::from(d)) {
            Ordering::Greater => true,
            Ordering::Equal => q.is_odd(),
            Ordering::Less => false,
        };
        if !up {
            return q;
        }
        let one = BigInt::from_i64(if self.negative { -1 } else { 1 });
        q.add(&one)
    }
}

/// A decimal: unscaled value × 10^-scale (Java's BigDecimal).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BigDecimal {
    pub unscaled: BigInt,
    pub scale: i32,
}

impl BigDecimal {
    /// From the CQL decimal encoding: 4-byte scale, then the unscaled varint.
    pub fn from_cql(b: &[u8]) -> Option<BigDecimal> {
        let scale = i32::from_be_bytes(b.get(0..4)?.try_into().ok()?);
        Some(BigDecimal {
            unscaled: BigInt::from_be_bytes(&b[4..]),
            scale,
        })
    }

    pub fn to_cql(&self) -> Bytes {
        let mut out = self.scale.to_be_bytes().to_vec();
        out.extend(self.unscaled.to_be_bytes());
        Bytes::from(out)
    }

    fn with_scale(&self, scale: i32) -> BigInt {
        let diff = (i64::from(scale) - i64::from(self.scale)).max(0) as u32;
        self.unscaled.mul_pow10(diff)
    }

    /// Exact sum; the result has the larger scale.
    pub fn add(&self, o: &BigDecimal) -> BigDecimal {
        let scale = self.scale.max(o.scale);
        BigDecimal {
            unscaled: self.with_scale(scale).add(&o.with_scale(scale)),
            scale,
        }
    }

    pub fn sub(&self, o: &BigDecimal) -> BigDecimal {
        let scale = self.scale.max(o.scale);
        BigDecimal {
            unscaled: self.with_scale(scale).sub(&o.with_scale(scale)),
            scale,
        }
    }

    /// `self / n` at this scale, rounded HALF_EVEN.
    pub fn div_half_even(&self, n: u32) -> BigDecimal {
        BigDecimal {
            unscaled: self.unscaled.div_half_even(n),
            scale: self.scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(v: i64) -> BigInt {
        BigInt::from_i64(v)
    }

    #[test]
    fn twos_complement_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            256,
            i64::MAX,
            i64::MIN + 1,
            -65536,
        ] {
            let b = big(v).to_be_bytes();
            let java: Vec<u8> = {
                // Minimal two's complement of v.
                let full = v.to_be_bytes();
                let mut s = 0;
                while s < 7
                    && ((full[s] == 0 && full[s + 1] & 0x80 == 0)
                        || (full[s] == 0xff && full[s + 1] & 0x80 != 0))
                {
                    s += 1;
                }
                full[s..].to_vec()
            };
            assert_eq!(b, java, "encoding of {v}");
            assert_eq!(BigInt::from_be_bytes(&b), big(v), "decoding of {v}");
        }
    }

    #[test]
    fn sums_beyond_i64_and_i128() {
        let mut s = BigInt::zero();
        for _ in 0..4 {
            s = s.add(&big(i64::MAX));
        }
        // 4 * (2^63 - 1) = 2^65 - 4
        assert_eq!(
            s.to_be_bytes(),
            vec![0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc]
        );
        let huge = big(1).mul_pow10(40);
        let back = huge.add(&big(-1)).add(&big(1));
        assert_eq!(back, huge);
        assert_eq!(huge.sub(&huge), BigInt::zero());
        assert_eq!(big(-7).div_small(2), (big(-3), 1));
    }

    #[test]
    fn half_even_division() {
        assert_eq!(big(5).div_half_even(2), big(2)); // 2.5 → 2
        assert_eq!(big(7).div_half_even(2), big(4)); // 3.5 → 4
        assert_eq!(big(-5).div_half_even(2), big(-2));
        assert_eq!(big(-7).div_half_even(2), big(-4));
        assert_eq!(big(10).div_half_even(3), big(3));
        assert_eq!(big(11).div_half_even(3), big(4));
    }

    #[test]
    fn decimal_sum_keeps_largest_scale() {
        let a = BigDecimal {
            unscaled: big(15),
            scale: 1,
        }; // 1.5
        let b = BigDecimal {
            unscaled: big(225),
            scale: 2,
        }; // 2.25
        let s = a.add(&b);
        assert_eq!((s.unscaled.clone(), s.scale), (big(375), 2));
        let round = BigDecimal::from_cql(&s.to_cql()).map(|d| d.scale);
        assert_eq!(round, Some(2));
    }
}
