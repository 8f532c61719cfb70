//! Distributions in cassandra-stress's notation: `FIXED(v)`, `UNIFORM(min..max)`,
//! `GAUSSIAN(min..max[,stdvrng])`, `GAUSSIAN(min..max,mean,stdev)` (aliases `gauss`, `normal`,
//! `norm`), `EXP(min..max)`, `SEQ(min..max)` (profiles), an optional leading `~` (inverted), and
//! ratios `fixed(1)/100`. Numbers take cassandra-stress's `k`/`m`/`b` suffixes (×10³, ×10⁶, ×10⁹).
//!
//! Sampling is deterministic given the seed: the same partition seed always yields the same
//! key and values, so a `read` finds what a `write` wrote.

use crate::error::StressError;

/// A small, fast, seedable PRNG (SplitMix64). Statistical quality is ample for load generation.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [min, max] (inclusive); `min` when the range is empty.
    pub fn range_inclusive(&mut self, min: i64, max: i64) -> i64 {
        if max <= min {
            return min;
        }
        let span = (max as i128 - min as i128 + 1) as u128;
        let v = (self.next_u64() as u128 * span) >> 64;
        (min as i128 + v as i128) as i64
    }

    /// Standard normal sample (Box-Muller).
    pub fn next_gaussian(&mut self) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// The SplitMix64 finaliser: a bijective 64-bit hash.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit salt for a name (FNV-1a, then mixed), like cassandra-stress's per-generator salt.
pub fn salt(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix64(h)
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Fixed(i64),
    Uniform,
    Gaussian {
        mean: f64,
        stdev: f64,
    },
    Exp {
        mean: f64,
    },
    /// Walks min..=max in order (profiles' `seq(..)`; `-pop seq=` is handled by the population).
    Seq,
}

/// A parsed distribution over the integers [min, max].
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    pub kind: Kind,
    pub min: i64,
    pub max: i64,
    pub inverted: bool,
}

impl Distribution {
    pub fn fixed(v: i64) -> Self {
        Self {
            kind: Kind::Fixed(v),
            min: v,
            max: v,
            inverted: false,
        }
    }

    pub fn uniform(min: i64, max: i64) -> Self {
        Self {
            kind: Kind::Uniform,
            min,
            max,
            inverted: false,
        }
    }

    /// Parses `NAME(args)` case-insensitively, e.g. `GAUSSIAN(1..1000,500,100)`.
    pub fn parse(spec: &str) -> Result<Self, StressError> {
        let bad = |why: &str| StressError::Distribution {
            spec: spec.to_string(),
            reason: why.to_string(),
        };
        let s = spec.trim();
        let (inverted, s) = match s.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let open = s.find('(').ok_or_else(|| bad("expected NAME(args)"))?;
        if !s.ends_with(')') {
            return Err(bad("expected a closing ')'"));
        }
        let name = s[..open].trim().to_ascii_lowercase();
        let args: Vec<&str> = s[open + 1..s.len() - 1]
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        let range = |a: Option<&&str>| -> Result<(i64, i64), StressError> {
            let a = a.ok_or_else(|| bad("missing min..max"))?;
            parse_range(a).ok_or_else(|| bad("expected min..max"))
        };
        let float = |a: &str| -> Result<f64, StressError> {
            a.parse::<f64>()
                .map_err(|_| bad(&format!("'{a}' is not a number")))
        };
        let d = match name.as_str() {
            "fixed" => {
                if args.len() != 1 {
                    return Err(bad("fixed takes one value"));
                }
                let v = parse_long(args[0]).ok_or_else(|| bad("expected a number"))?;
                Self::fixed(v)
            }
            "uniform" => {
                if args.len() != 1 {
                    return Err(bad("uniform takes min..max"));
                }
                let (min, max) = range(args.first())?;
                Self::uniform(min, max)
            }
            "seq" => {
                let (min, max) = range(args.first())?;
                Self {
                    kind: Kind::Seq,
                    min,
                    max,
                    inverted: false,
                }
            }
            "gaussian" | "gauss" | "normal" | "norm" => {
                let (min, max) = range(args.first())?;
                let (mean, stdev) = match args.len() {
                    1 | 2 => {
                        let stdvrng = if args.len() == 2 {
                            float(args[1])?
                        } else {
                            3.0
                        };
                        let mean = (min as f64 + max as f64) / 2.0;
                        (mean, ((max as f64 - min as f64) / 2.0) / stdvrng)
                    }
                    3 => (float(args[1])?, float(args[2])?),
                    _ => {
                        return Err(bad(
                            "gaussian takes min..max[,stdvrng] or min..max,mean,stdev",
                        ));
                    }
                };
                Self {
                    kind: Kind::Gaussian { mean, stdev },
                    min,
                    max,
                    inverted: false,
                }
            }
            "exp" => {
                let (min, max) = range(args.first())?;
                // Like cassandra-stress: the mean makes the top of the range reachable.
                let span = (max - min).max(1) as f64;
                let mean = span / (-(span.recip().sqrt()).ln()).max(1e-9);
                Self {
                    kind: Kind::Exp { mean },
                    min,
                    max,
                    inverted: false,
                }
            }
            other => return Err(bad(&format!("unknown distribution '{other}'"))),
        };
        if d.min > d.max {
            return Err(bad("min is greater than max"));
        }
        Ok(Self { inverted, ..d })
    }

    /// Draws one value in [min, max].
    pub fn sample(&self, rng: &mut Rng) -> i64 {
        let v = match &self.kind {
            Kind::Fixed(v) => *v,
            Kind::Uniform | Kind::Seq => rng.range_inclusive(self.min, self.max),
            Kind::Gaussian { mean, stdev } => {
                let x = mean + stdev * rng.next_gaussian();
                x.round().clamp(self.min as f64, self.max as f64) as i64
            }
            Kind::Exp { mean } => {
                let x = self.min as f64 - mean * (1.0 - rng.next_f64()).ln();
                x.round().clamp(self.min as f64, self.max as f64) as i64
            }
        };
        if self.inverted {
            self.max - (v - self.min)
        } else {
            v
        }
    }

    /// The value for the `i`-th element when the distribution is walked in order (for `seq`);
    /// any other distribution samples with a generator seeded by `seed`.
    pub fn value_at(&self, i: u64, seed: u64) -> i64 {
        match self.kind {
            Kind::Seq => {
                let span = (self.max as i128 - self.min as i128 + 1).max(1) as u128;
                (self.min as i128 + (i as u128 % span) as i128) as i64
            }
            _ => self.sample(&mut Rng::new(mix64(seed ^ i.wrapping_mul(0x9E37_79B9)))),
        }
    }

    pub fn mean(&self) -> f64 {
        match &self.kind {
            Kind::Fixed(v) => *v as f64,
            Kind::Gaussian { mean, .. } => mean.clamp(self.min as f64, self.max as f64),
            _ => (self.min as f64 + self.max as f64) / 2.0,
        }
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.inverted {
            f.write_str("~")?;
        }
        match &self.kind {
            Kind::Fixed(v) => write!(f, "FIXED({v})"),
            Kind::Uniform => write!(f, "UNIFORM({}..{})", self.min, self.max),
            Kind::Seq => write!(f, "SEQ({}..{})", self.min, self.max),
            Kind::Gaussian { mean, stdev } => {
                write!(f, "GAUSSIAN({}..{},{mean},{stdev})", self.min, self.max)
            }
            Kind::Exp { .. } => write!(f, "EXP({}..{})", self.min, self.max),
        }
    }
}

/// A distribution divided by a constant: `fixed(1)/100` is "1 in 100".
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    pub dist: Distribution,
    pub divisor: f64,
}

impl Ratio {
    pub fn parse(spec: &str) -> Result<Self, StressError> {
        let spec = spec.trim();
        match spec.rfind('/') {
            Some(i) if spec[i + 1..].trim().parse::<f64>().is_ok() => {
                let divisor: f64 = spec[i + 1..].trim().parse().unwrap_or(1.0);
                if divisor <= 0.0 {
                    return Err(StressError::Distribution {
                        spec: spec.into(),
                        reason: "divisor must be positive".into(),
                    });
                }
                Ok(Self {
                    dist: Distribution::parse(&spec[..i])?,
                    divisor,
                })
            }
            _ => Ok(Self {
                dist: Distribution::parse(spec)?,
                divisor: 1.0,
            }),
        }
    }

    /// A fraction in (0, 1].
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        (self.dist.sample(rng) as f64 / self.divisor).clamp(0.0, 1.0)
    }
}

/// Parses a number with cassandra-stress's suffixes: `10k`, `1400m`, `5b` (case-insensitive).
pub fn parse_long(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let (digits, mult) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1_000i64),
        'm' => (&s[..s.len() - 1], 1_000_000),
        'b' => (&s[..s.len() - 1], 1_000_000_000),
        _ => (s.as_str(), 1),
    };
    digits.trim().parse::<i64>().ok()?.checked_mul(mult)
}

/// Parses `min..max` (two or more dots, like cassandra-stress).
pub fn parse_range(s: &str) -> Option<(i64, i64)> {
    let i = s.find("..")?;
    let lo = parse_long(&s[..i])?;
    let hi = parse_long(s[i..].trim_start_matches('.'))?;
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers_with_suffixes() {
        assert_eq!(parse_long("10"), Some(10));
        assert_eq!(parse_long("100k"), Some(100_000));
        assert_eq!(parse_long("1400m"), Some(1_400_000_000));
        assert_eq!(parse_long("5b"), Some(5_000_000_000));
        assert_eq!(parse_long("5B"), Some(5_000_000_000));
        assert_eq!(parse_long("x"), None);
        assert_eq!(parse_range("1..5b"), Some((1, 5_000_000_000)));
        assert_eq!(parse_range("1...10"), Some((1, 10)));
        assert_eq!(parse_range("1-10"), None);
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(
            Distribution::parse("FIXED(34)").unwrap(),
            Distribution::fixed(34)
        );
        assert_eq!(
            Distribution::parse("UNIFORM(1..1000)").unwrap(),
            Distribution::uniform(1, 1000)
        );
        let g = Distribution::parse("GAUSSIAN(1..1000,500,100)").unwrap();
        assert_eq!(
            g.kind,
            Kind::Gaussian {
                mean: 500.0,
                stdev: 100.0
            }
        );
        let g = Distribution::parse("gauss(1..10000000,5000000,500000)").unwrap();
        assert_eq!(
            g.kind,
            Kind::Gaussian {
                mean: 5_000_000.0,
                stdev: 500_000.0
            }
        );
        // Default: mean in the middle, 3 stdevs to each edge.
        let g = Distribution::parse("gaussian(0..1000)").unwrap();
        assert_eq!(
            g.kind,
            Kind::Gaussian {
                mean: 500.0,
                stdev: 500.0 / 3.0
            }
        );
        let g = Distribution::parse("normal(0..1000,5)").unwrap();
        assert_eq!(
            g.kind,
            Kind::Gaussian {
                mean: 500.0,
                stdev: 100.0
            }
        );
        let s = Distribution::parse("seq(1..5b)").unwrap();
        assert_eq!((s.kind, s.min, s.max), (Kind::Seq, 1, 5_000_000_000));
        assert!(Distribution::parse("~exp(1..10)").unwrap().inverted);
        assert!(Distribution::parse("zipf(1..10)").is_err());
        assert!(Distribution::parse("uniform(10..1)").is_err());
        assert!(Distribution::parse("uniform").is_err());
        assert!(Distribution::parse("fixed(a)").is_err());
    }

    #[test]
    fn samples_stay_in_range() {
        let mut rng = Rng::new(7);
        for spec in [
            "uniform(5..10)",
            "gaussian(1..100,50,1000)",
            "exp(1..1000)",
            "~exp(1..1000)",
            "fixed(3)",
        ] {
            let d = Distribution::parse(spec).unwrap();
            for _ in 0..10_000 {
                let v = d.sample(&mut rng);
                assert!(v >= d.min.min(3) && v <= d.max.max(3), "{spec}: {v}");
            }
        }
    }

    #[test]
    fn uniform_covers_the_range_evenly() {
        let d = Distribution::uniform(1, 10);
        let mut rng = Rng::new(1);
        let mut hist = [0u32; 11];
        for _ in 0..100_000 {
            hist[d.sample(&mut rng) as usize] += 1;
        }
        assert_eq!(hist[0], 0);
        for c in &hist[1..] {
            assert!((9_000..11_000).contains(c), "{hist:?}");
        }
    }

    #[test]
    fn gaussian_has_the_requested_moments() {
        let d = Distribution::parse("GAUSSIAN(1..1000000,500000,10000)").unwrap();
        let mut rng = Rng::new(42);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| d.sample(&mut rng) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 500_000.0).abs() < 200.0, "mean {mean}");
        assert!(
            (var.sqrt() - 10_000.0).abs() < 200.0,
            "stdev {}",
            var.sqrt()
        );
    }

    #[test]
    fn seq_walks_in_order_and_wraps() {
        let d = Distribution::parse("seq(0..99)").unwrap();
        assert_eq!(d.value_at(0, 9), 0);
        assert_eq!(d.value_at(99, 9), 99);
        assert_eq!(d.value_at(100, 9), 0);
    }

    #[test]
    fn display_round_trips() {
        for spec in [
            "FIXED(34)",
            "UNIFORM(1..10)",
            "GAUSSIAN(1..1000,500,100)",
            "~EXP(1..10)",
        ] {
            let d = Distribution::parse(spec).unwrap();
            let again = Distribution::parse(&d.to_string()).unwrap();
            assert_eq!(d.kind, again.kind, "{spec}");
            assert_eq!(
                (d.min, d.max, d.inverted),
                (again.min, again.max, again.inverted)
            );
        }
    }

    #[test]
    fn ratios() {
        let r = Ratio::parse("fixed(1)/100").unwrap();
        assert_eq!(r.divisor, 100.0);
        assert_eq!(r.sample(&mut Rng::new(1)), 0.01);
        assert_eq!(Ratio::parse("fixed(1)").unwrap().divisor, 1.0);
        assert!(Ratio::parse("fixed(1)/0").is_err());
    }

    #[test]
    fn deterministic_per_seed() {
        let d = Distribution::uniform(1, 1_000_000);
        assert_eq!(d.value_at(3, 77), d.value_at(3, 77));
        assert_ne!(d.value_at(3, 77), d.value_at(4, 77));
    }
}
