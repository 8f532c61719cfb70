//! Decoding a prefix of an LZ4 block.
//!
//! A point read needs one partition of a 16 KiB chunk, usually far from its end, and LZ4
//! decodes front to back: [`decode_prefix`] stops at the first sequence boundary at or past
//! the bytes the read needs, so on average half a chunk is decoded instead of all of it.
//! Whole chunks (block cache fills, scans, compaction) still go through `lz4_flex`.
//!
//! Block format (lz4 `lz4_Block_format.md`): a sequence is a token byte (high nibble: literal
//! length, low nibble: match length - 4; 15 means "more length bytes follow, each added, until
//! one is not 255"), the literals, then a 2-byte little-endian match offset and the match
//! length bytes. The last sequence has literals only. A match may overlap its own output
//! (offset < length), which repeats the last `offset` bytes.

/// Why a block did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Lz4Error {
    #[error("LZ4 block ends inside a sequence at input byte {0}")]
    Truncated(usize),
    #[error("LZ4 block writes past its {0}-byte output")]
    TooLong(usize),
    #[error("LZ4 match offset {offset} points before the start of the output at byte {at}")]
    BadOffset { offset: usize, at: usize },
}

/// The step of the fast copies.
const WILD: usize = 16;

/// Decodes the LZ4 block `src` into `out[..]` until at least `need` bytes are out (or the
/// block ends); returns how many bytes were decoded. `out.len()` is the block's full
/// uncompressed size: a block writing past it is an error, as is any malformed sequence.
pub fn decode_prefix(src: &[u8], out: &mut [u8], need: usize) -> Result<usize, Lz4Error> {
    let (mut i, mut pos) = (0usize, 0usize);
    let cap = out.len();
    loop {
        let token = *src.get(i).ok_or(Lz4Error::Truncated(i))?;
        i += 1;
        let mut lit = usize::from(token >> 4);
        if lit == 15 {
            lit += length_bytes(src, &mut i)?;
        }
        let (lit_end, out_end) = match (i.checked_add(lit), pos.checked_add(lit)) {
            (Some(a), Some(b)) if a <= src.len() && b <= cap => (a, b),
            (Some(a), _) if a <= src.len() => return Err(Lz4Error::TooLong(cap)),
            _ => return Err(Lz4Error::Truncated(i)),
        };
        let wide = lit.next_multiple_of(WILD);
        if i + wide <= src.len() && pos + wide <= cap {
            // Whole 16-byte steps (fixed-size copies, no memcpy call); the bytes written
            // past the literals are overwritten by what follows.
            let mut k = 0;
            while k < lit {
                copy16(src, i + k, out, pos + k);
                k += WILD;
            }
        } else {
            out[pos..out_end].copy_from_slice(&src[i..lit_end]);
        }
        i = lit_end;
        pos += lit;
        if i == src.len() || pos >= need {
            return Ok(pos);
        }
        let off = match src.get(i..i + 2) {
            Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
            _ => return Err(Lz4Error::Truncated(i)),
        };
        i += 2;
        if off == 0 || off > pos {
            return Err(Lz4Error::BadOffset {
                offset: off,
                at: pos,
            });
        }
        let mut len = usize::from(token & 15) + 4;
        if token & 15 == 15 {
            len += length_bytes(src, &mut i)?;
        }
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= cap)
            .ok_or(Lz4Error::TooLong(cap))?;
        let start = pos - off;
        if off >= WILD && pos + len.next_multiple_of(WILD) <= cap {
            // Each 16-byte step reads bytes at least 16 behind where it writes: all final.
            let mut k = 0;
            while k < len {
                let mut step = [0u8; WILD];
                step.copy_from_slice(&out[start + k..start + k + WILD]);
                out[pos + k..pos + k + WILD].copy_from_slice(&step);
                k += WILD;
            }
        } else if off >= len {
            out.copy_within(start..start + len, pos);
        } else {
            // Overlapping: the match repeats the last `off` bytes; copy in growing steps
            // (each step's source is already final).
            let mut done = 0;
            while done < len {
                let n = (len - done).min(pos + done - start);
                out.copy_within(start..start + n, pos + done);
                done += n;
            }
        }
        pos = end;
        if pos >= need {
            return Ok(pos);
        }
    }
}

/// Copies `src[from..from + 16]` to `out[to..to + 16]` as one fixed-size move (the caller
/// checked both ranges).
#[inline(always)]
fn copy16(src: &[u8], from: usize, out: &mut [u8], to: usize) {
    let mut step = [0u8; WILD];
    step.copy_from_slice(&src[from..from + WILD]);
    out[to..to + WILD].copy_from_slice(&step);
}

/// The extra length bytes after a 15 nibble: each added, the last one below 255.
fn length_bytes(src: &[u8], i: &mut usize) -> Result<usize, Lz4Error> {
    let mut n = 0usize;
    loop {
        let b = *src.get(*i).ok_or(Lz4Error::Truncated(*i))?;
        *i += 1;
        n = n
            .checked_add(usize::from(b))
            .ok_or(Lz4Error::Truncated(*i))?;
        if b != 255 {
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seed: u64, len: usize) -> Vec<u8> {
        // Runs, repeats at several distances and noise: every kind of sequence.
        let mut x = seed | 1;
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 4 {
                0 => v.extend(std::iter::repeat_n(
                    (x >> 8) as u8,
                    (x >> 16) as usize % 300,
                )),
                1 if v.len() > 40 => {
                    let back = 1 + (x >> 8) as usize % v.len().min(70_000);
                    let n = (x >> 24) as usize % 80;
                    for _ in 0..n {
                        v.push(v[v.len() - back]);
                    }
                }
                _ => v.extend((0..(x >> 8) as usize % 40).map(|k| (x >> (k % 7)) as u8)),
            }
        }
        v.truncate(len);
        v
    }

    #[test]
    fn every_prefix_matches_the_full_decode() {
        for seed in 1..40u64 {
            let len = [0usize, 1, 15, 16, 300, 4096, 16384, 70_000][seed as usize % 8];
            let data = sample(seed, len);
            let block = lz4_flex::block::compress(&data);
            let mut out = vec![0u8; data.len()];
            assert_eq!(decode_prefix(&block, &mut out, usize::MAX), Ok(data.len()));
            assert_eq!(out, data, "seed {seed}");
            for need in [0, 1, len / 3, len / 2, len.saturating_sub(1), len] {
                let mut out = vec![0u8; data.len()];
                let n = decode_prefix(&block, &mut out, need).expect("decodes");
                assert!(n >= need.min(len), "seed {seed} need {need}: {n}");
                assert_eq!(out[..n], data[..n], "seed {seed} need {need}");
            }
        }
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        let data = sample(7, 5000);
        let block = lz4_flex::block::compress(&data);
        // Every truncation, and every single-byte change of the first 200 bytes.
        for cut in 0..block.len() {
            let mut out = vec![0u8; data.len()];
            let _ = decode_prefix(&block[..cut], &mut out, usize::MAX);
        }
        for at in 0..200.min(block.len()) {
            for delta in [1u8, 0x80, 0xff] {
                let mut b = block.clone();
                b[at] = b[at].wrapping_add(delta);
                let mut out = vec![0u8; data.len()];
                let _ = decode_prefix(&b, &mut out, usize::MAX);
            }
        }
        // Output too small, offset zero, offset before the start.
        let mut small = vec![0u8; 10];
        assert_eq!(
            decode_prefix(&block, &mut small, usize::MAX),
            Err(Lz4Error::TooLong(10))
        );
        let mut out = vec![0u8; 64];
        assert!(matches!(
            decode_prefix(&[0x10, b'a', 0, 0], &mut out, usize::MAX),
            Err(Lz4Error::BadOffset { offset: 0, .. })
        ));
        assert!(matches!(
            decode_prefix(&[0x10, b'a', 2, 0], &mut out, usize::MAX),
            Err(Lz4Error::BadOffset { offset: 2, .. })
        ));
        assert_eq!(
            decode_prefix(&[0xf0], &mut out, usize::MAX),
            Err(Lz4Error::Truncated(1))
        );
    }
}
