//! Consistency levels as they travel on the wire (`[consistency]` = `[short]`).

/// A consistency level (spec §3 `[consistency]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Consistency {
    Any = 0x00,
    One = 0x01,
    Two = 0x02,
    Three = 0x03,
    Quorum = 0x04,
    All = 0x05,
    LocalQuorum = 0x06,
    EachQuorum = 0x07,
    Serial = 0x08,
    LocalSerial = 0x09,
    LocalOne = 0x0A,
}

impl Consistency {
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0x00 => Self::Any,
            0x01 => Self::One,
            0x02 => Self::Two,
            0x03 => Self::Three,
            0x04 => Self::Quorum,
            0x05 => Self::All,
            0x06 => Self::LocalQuorum,
            0x07 => Self::EachQuorum,
            0x08 => Self::Serial,
            0x09 => Self::LocalSerial,
            0x0A => Self::LocalOne,
            _ => return None,
        })
    }

    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// Cassandra's upper-case name (as in error messages: "LOCAL_QUORUM").
    pub fn name(self) -> &'static str {
        match self {
            Self::Any => "ANY",
            Self::One => "ONE",
            Self::Two => "TWO",
            Self::Three => "THREE",
            Self::Quorum => "QUORUM",
            Self::All => "ALL",
            Self::LocalQuorum => "LOCAL_QUORUM",
            Self::EachQuorum => "EACH_QUORUM",
            Self::Serial => "SERIAL",
            Self::LocalSerial => "LOCAL_SERIAL",
            Self::LocalOne => "LOCAL_ONE",
        }
    }

    pub fn is_serial(self) -> bool {
        matches!(self, Self::Serial | Self::LocalSerial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all() {
        for v in 0u16..=0x0A {
            let c = Consistency::from_u16(v).expect("known");
            assert_eq!(c.as_u16(), v);
        }
        assert_eq!(Consistency::from_u16(0x0B), None);
    }
}
