//! Column types as the wire describes them (`[option]`, spec §4.2.5.2). This is the wire
//! enum only; the CQL type system lives in `amphora-types`, which maps onto it.

use bytes::{BufMut, BytesMut};

use crate::envelope::ProtocolVersion;
use crate::error::{DecodeError, EncodeError};
use crate::wire::{Reader, SHORT_MAX, write_string};

/// Class name of the duration type, sent as a custom type before v5.
pub const DURATION_CLASS: &str = "org.apache.cassandra.db.marshal.DurationType";

/// A column type option.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// 0x0000 + `[string]` class name.
    Custom(String),
    Ascii,
    Bigint,
    Blob,
    Boolean,
    Counter,
    Decimal,
    Double,
    Float,
    Int,
    Timestamp,
    Uuid,
    Varchar,
    Varint,
    Timeuuid,
    Inet,
    Date,
    Time,
    Smallint,
    Tinyint,
    /// 0x0015 in v5; a custom type ([`DURATION_CLASS`]) before.
    Duration,
    List(Box<ColumnType>),
    Map(Box<ColumnType>, Box<ColumnType>),
    Set(Box<ColumnType>),
    Udt {
        keyspace: String,
        name: String,
        fields: Vec<(String, ColumnType)>,
    },
    Tuple(Vec<ColumnType>),
}

/// Nesting bound for decoding (a hostile option cannot recurse the stack away).
const MAX_DEPTH: usize = 64;

impl ColumnType {
    /// Appends the `[option]` for `version`.
    pub fn encode(&self, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let simple = |buf: &mut BytesMut, id: u16| buf.put_u16(id);
        match self {
            ColumnType::Custom(class) => {
                buf.put_u16(0x0000);
                write_string(buf, class)?;
            }
            ColumnType::Ascii => simple(buf, 0x0001),
            ColumnType::Bigint => simple(buf, 0x0002),
            ColumnType::Blob => simple(buf, 0x0003),
            ColumnType::Boolean => simple(buf, 0x0004),
            ColumnType::Counter => simple(buf, 0x0005),
            ColumnType::Decimal => simple(buf, 0x0006),
            ColumnType::Double => simple(buf, 0x0007),
            ColumnType::Float => simple(buf, 0x0008),
            ColumnType::Int => simple(buf, 0x0009),
            ColumnType::Timestamp => simple(buf, 0x000B),
            ColumnType::Uuid => simple(buf, 0x000C),
            ColumnType::Varchar => simple(buf, 0x000D),
            ColumnType::Varint => simple(buf, 0x000E),
            ColumnType::Timeuuid => simple(buf, 0x000F),
            ColumnType::Inet => simple(buf, 0x0010),
            // v3 lacks these ids: Cassandra sends them as custom types there.
            ColumnType::Date if version < ProtocolVersion::V4 => {
                custom(buf, "org.apache.cassandra.db.marshal.SimpleDateType")?;
            }
            ColumnType::Time if version < ProtocolVersion::V4 => {
                custom(buf, "org.apache.cassandra.db.marshal.TimeType")?;
            }
            ColumnType::Smallint if version < ProtocolVersion::V4 => {
                custom(buf, "org.apache.cassandra.db.marshal.ShortType")?;
            }
            ColumnType::Tinyint if version < ProtocolVersion::V4 => {
                custom(buf, "org.apache.cassandra.db.marshal.ByteType")?;
            }
            ColumnType::Date => simple(buf, 0x0011),
            ColumnType::Time => simple(buf, 0x0012),
            ColumnType::Smallint => simple(buf, 0x0013),
            ColumnType::Tinyint => simple(buf, 0x0014),
            ColumnType::Duration if version < ProtocolVersion::V5 => custom(buf, DURATION_CLASS)?,
            ColumnType::Duration => simple(buf, 0x0015),
            ColumnType::List(e) => {
                buf.put_u16(0x0020);
                e.encode(version, buf)?;
            }
            ColumnType::Map(k, v) => {
                buf.put_u16(0x0021);
                k.encode(version, buf)?;
                v.encode(version, buf)?;
            }
            ColumnType::Set(e) => {
                buf.put_u16(0x0022);
                e.encode(version, buf)?;
            }
            ColumnType::Udt {
                keyspace,
                name,
                fields,
            } => {
                buf.put_u16(0x0030);
                write_string(buf, keyspace)?;
                write_string(buf, name)?;
                buf.put_u16(count(fields.len())?);
                for (field, ty) in fields {
                    write_string(buf, field)?;
                    ty.encode(version, buf)?;
                }
            }
            ColumnType::Tuple(elems) => {
                buf.put_u16(0x0031);
                buf.put_u16(count(elems.len())?);
                for ty in elems {
                    ty.encode(version, buf)?;
                }
            }
        }
        Ok(())
    }

    /// Reads an `[option]` (used by tests and tools; servers only write them).
    pub fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Self::decode_depth(r, 0)
    }

    fn decode_depth(r: &mut Reader, depth: usize) -> Result<Self, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep { max: MAX_DEPTH });
        }
        let id = r.read_u16()?;
        let d = depth + 1;
        Ok(match id {
            0x0000 => {
                let class = r.read_string()?;
                if class == DURATION_CLASS {
                    ColumnType::Duration
                } else {
                    ColumnType::Custom(class)
                }
            }
            0x0001 => ColumnType::Ascii,
            0x0002 => ColumnType::Bigint,
            0x0003 => ColumnType::Blob,
            0x0004 => ColumnType::Boolean,
            0x0005 => ColumnType::Counter,
            0x0006 => ColumnType::Decimal,
            0x0007 => ColumnType::Double,
            0x0008 => ColumnType::Float,
            0x0009 => ColumnType::Int,
            0x000A => ColumnType::Varchar, // legacy "text"
            0x000B => ColumnType::Timestamp,
            0x000C => ColumnType::Uuid,
            0x000D => ColumnType::Varchar,
            0x000E => ColumnType::Varint,
            0x000F => ColumnType::Timeuuid,
            0x0010 => ColumnType::Inet,
            0x0011 => ColumnType::Date,
            0x0012 => ColumnType::Time,
            0x0013 => ColumnType::Smallint,
            0x0014 => ColumnType::Tinyint,
            0x0015 => ColumnType::Duration,
            0x0020 => ColumnType::List(Box::new(Self::decode_depth(r, d)?)),
            0x0021 => {
                let k = Self::decode_depth(r, d)?;
                let v = Self::decode_depth(r, d)?;
                ColumnType::Map(Box::new(k), Box::new(v))
            }
            0x0022 => ColumnType::Set(Box::new(Self::decode_depth(r, d)?)),
            0x0030 => {
                let keyspace = r.read_string()?;
                let name = r.read_string()?;
                let n = r.read_u16()? as usize;
                let mut fields = Vec::with_capacity(n.min(r.remaining() / 4));
                for _ in 0..n {
                    let f = r.read_string()?;
                    fields.push((f, Self::decode_depth(r, d)?));
                }
                ColumnType::Udt {
                    keyspace,
                    name,
                    fields,
                }
            }
            0x0031 => {
                let n = r.read_u16()? as usize;
                let mut elems = Vec::with_capacity(n.min(r.remaining() / 2));
                for _ in 0..n {
                    elems.push(Self::decode_depth(r, d)?);
                }
                ColumnType::Tuple(elems)
            }
            other => return Err(DecodeError::UnknownTypeOption(other)),
        })
    }
}

fn custom(buf: &mut BytesMut, class: &str) -> Result<(), EncodeError> {
    buf.put_u16(0x0000);
    write_string(buf, class)
}

fn count(n: usize) -> Result<u16, EncodeError> {
    u16::try_from(n).map_err(|_| EncodeError::TooManyItems {
        length: n,
        max: SHORT_MAX,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encoded(t: &ColumnType, v: ProtocolVersion) -> Vec<u8> {
        let mut b = BytesMut::new();
        t.encode(v, &mut b).expect("encode");
        b.to_vec()
    }

    #[test]
    fn ids_per_spec() {
        assert_eq!(
            encoded(&ColumnType::Varchar, ProtocolVersion::V4),
            [0x00, 0x0D]
        );
        assert_eq!(
            encoded(&ColumnType::Timestamp, ProtocolVersion::V4),
            [0x00, 0x0B]
        );
        assert_eq!(
            encoded(&ColumnType::Duration, ProtocolVersion::V5),
            [0x00, 0x15]
        );
        let v4 = encoded(&ColumnType::Duration, ProtocolVersion::V4);
        assert_eq!(&v4[..4], &[0x00, 0x00, 0x00, DURATION_CLASS.len() as u8]);
        assert_eq!(&v4[4..], DURATION_CLASS.as_bytes());
        assert_eq!(
            encoded(
                &ColumnType::Map(Box::new(ColumnType::Int), Box::new(ColumnType::Blob)),
                ProtocolVersion::V4
            ),
            [0x00, 0x21, 0x00, 0x09, 0x00, 0x03]
        );
        assert_eq!(
            encoded(&ColumnType::Smallint, ProtocolVersion::V4),
            [0x00, 0x13]
        );
        assert_eq!(
            encoded(&ColumnType::Smallint, ProtocolVersion::V3)[..2],
            [0x00, 0x00]
        );
    }

    #[test]
    fn deep_nesting_is_an_error() {
        let mut raw = Vec::new();
        for _ in 0..1000 {
            raw.extend_from_slice(&[0x00, 0x20]);
        }
        raw.extend_from_slice(&[0x00, 0x09]);
        let mut r = Reader::new(bytes::Bytes::from(raw));
        assert!(matches!(
            ColumnType::decode(&mut r),
            Err(DecodeError::TooDeep { .. })
        ));
    }

    pub(crate) fn arb_type() -> impl Strategy<Value = ColumnType> {
        let leaf = prop_oneof![
            Just(ColumnType::Ascii),
            Just(ColumnType::Bigint),
            Just(ColumnType::Blob),
            Just(ColumnType::Boolean),
            Just(ColumnType::Counter),
            Just(ColumnType::Decimal),
            Just(ColumnType::Double),
            Just(ColumnType::Float),
            Just(ColumnType::Int),
            Just(ColumnType::Timestamp),
            Just(ColumnType::Uuid),
            Just(ColumnType::Varchar),
            Just(ColumnType::Varint),
            Just(ColumnType::Timeuuid),
            Just(ColumnType::Inet),
            Just(ColumnType::Date),
            Just(ColumnType::Time),
            Just(ColumnType::Smallint),
            Just(ColumnType::Tinyint),
            Just(ColumnType::Duration),
            "[a-z.]{1,20}".prop_map(ColumnType::Custom),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|t| ColumnType::List(Box::new(t))),
                inner.clone().prop_map(|t| ColumnType::Set(Box::new(t))),
                (inner.clone(), inner.clone())
                    .prop_map(|(k, v)| ColumnType::Map(Box::new(k), Box::new(v))),
                proptest::collection::vec(inner.clone(), 0..4).prop_map(ColumnType::Tuple),
                (
                    "[a-z]{1,8}",
                    "[a-z]{1,8}",
                    proptest::collection::vec(("[a-z]{1,8}", inner), 0..4)
                )
                    .prop_map(|(keyspace, name, fields)| ColumnType::Udt {
                        keyspace,
                        name,
                        fields
                    }),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip_v5(t in arb_type()) {
            let mut b = BytesMut::new();
            t.encode(ProtocolVersion::V5, &mut b).expect("encode");
            let mut r = Reader::new(b.freeze());
            prop_assert_eq!(ColumnType::decode(&mut r).ok(), Some(t));
            prop_assert_eq!(r.remaining(), 0);
        }
    }
}
