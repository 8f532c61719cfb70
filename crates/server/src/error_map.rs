//! The one table mapping typed errors to CQL ERROR responses (DESIGN.md §3: "the mapping to
//! CQL error codes lives in one place in `server`").
//!
//! | `QueryError`    | code   | extra body                              |
//! |-----------------|--------|-----------------------------------------|
//! | Server          | 0x0000 | –                                       |
//! | Unavailable     | 0x1000 | cl, required, alive                     |
//! | Overloaded      | 0x1001 | –                                       |
//! | Truncate        | 0x1003 | –                                       |
//! | WriteTimeout    | 0x1100 | cl, received, blockfor, writeType       |
//! | ReadTimeout     | 0x1200 | cl, received, blockfor, data_present    |
//! | ReadFailure     | 0x1300 | cl, received, blockfor, reasonmap (v5) / numfailures (v4), data_present |
//! | WriteFailure    | 0x1500 | cl, received, blockfor, failures, type  |
//! | Syntax          | 0x2000 | –                                       |
//! | Unauthorized    | 0x2100 | –                                       |
//! | Invalid         | 0x2200 | –                                       |
//! | Config          | 0x2300 | –                                       |
//! | AlreadyExists   | 0x2400 | keyspace, table ("" for a keyspace)     |
//! | Unprepared      | 0x2500 | id                                      |
//!
//! Protocol decode errors (`DecodeError`) are Protocol_error 0x000A on the offending stream;
//! envelope errors (`FrameError`) are answered by `amphora_protocol::encode_frame_error`.

use amphora_coordinator::{ConsistencyCode, QueryError, WriteKind};
use amphora_protocol::{Consistency, DecodeError, ErrorKind, ErrorResponse, WriteType};

/// The ERROR response for a coordinator error. `replica` is the address reported for replica
/// failures (ReadFailure's reason map): with RF=1 the only replica is this node, the address
/// the client connected to (unspecified if unknown).
pub fn query_error(e: &QueryError, replica: Option<std::net::IpAddr>) -> ErrorResponse {
    let message = e.to_string();
    let kind = match e {
        QueryError::Syntax(_) => ErrorKind::SyntaxError,
        QueryError::Invalid(_) => ErrorKind::Invalid,
        QueryError::AlreadyExists {
            keyspace, table, ..
        } => ErrorKind::AlreadyExists {
            keyspace: keyspace.clone(),
            table: table.clone(),
        },
        QueryError::Unprepared { id } => ErrorKind::Unprepared { id: id.clone() },
        QueryError::Unauthorized(_) => ErrorKind::Unauthorized,
        QueryError::Config(_) => ErrorKind::ConfigError,
        QueryError::Truncate(_) => ErrorKind::TruncateError,
        QueryError::Unavailable {
            consistency,
            required,
            alive,
        } => ErrorKind::Unavailable {
            consistency: consistency_level(*consistency),
            required: *required,
            alive: *alive,
        },
        QueryError::WriteTimeout {
            consistency,
            received,
            block_for,
            write_kind,
        } => ErrorKind::WriteTimeout {
            consistency: consistency_level(*consistency),
            received: *received,
            block_for: *block_for,
            write_type: write_type(*write_kind),
            contentions: 0,
        },
        QueryError::ReadTimeout {
            consistency,
            received,
            block_for,
            data_present,
        } => ErrorKind::ReadTimeout {
            consistency: consistency_level(*consistency),
            received: *received,
            block_for: *block_for,
            data_present: *data_present,
        },
        QueryError::ReadFailure {
            consistency,
            received,
            block_for,
            failures,
            data_present,
        } => ErrorKind::ReadFailure {
            consistency: consistency_level(*consistency),
            received: *received,
            block_for: *block_for,
            // Reason UNKNOWN (0x0000).
            failures: (0..*failures)
                .map(|_| amphora_protocol::FailureReason {
                    endpoint: replica
                        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
                    code: 0,
                })
                .collect(),
            data_present: *data_present,
        },
        QueryError::Overloaded(_) => ErrorKind::Overloaded,
        QueryError::WriteFailure {
            consistency,
            received,
            block_for,
            write_kind,
            ..
        } => ErrorKind::WriteFailure {
            consistency: consistency_level(*consistency),
            received: *received,
            block_for: *block_for,
            // The coordinator does not report the failing replicas yet.
            failures: Vec::new(),
            write_type: write_type(*write_kind),
        },
        QueryError::Server(_) => ErrorKind::ServerError,
        QueryError::FunctionFailure {
            keyspace,
            function,
            arg_types,
            ..
        } => ErrorKind::FunctionFailure {
            keyspace: keyspace.clone(),
            function: function.clone(),
            arg_types: arg_types.clone(),
        },
    };
    ErrorResponse::new(kind, message)
}

/// Protocol_error for a request body that does not decode.
pub fn decode_error(e: &DecodeError) -> ErrorResponse {
    ErrorResponse::protocol_error(e.to_string())
}

fn consistency_level(code: ConsistencyCode) -> Consistency {
    // The coordinator only reports levels it received from the wire; ONE is a safe stand-in.
    Consistency::from_u16(code).unwrap_or(Consistency::One)
}

fn write_type(k: WriteKind) -> WriteType {
    match k {
        WriteKind::Simple => WriteType::Simple,
        WriteKind::Batch => WriteType::Batch,
        WriteKind::UnloggedBatch => WriteType::UnloggedBatch,
        WriteKind::Counter => WriteType::Counter,
        WriteKind::BatchLog => WriteType::BatchLog,
        WriteKind::Cas => WriteType::Cas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_protocol::ErrorCode;
    use bytes::Bytes;

    #[test]
    fn every_variant_has_its_code() {
        let cases: Vec<(QueryError, ErrorCode)> = vec![
            (QueryError::Syntax("s".into()), ErrorCode::SyntaxError),
            (QueryError::Invalid("i".into()), ErrorCode::Invalid),
            (
                QueryError::AlreadyExists {
                    keyspace: "ks".into(),
                    table: "t".into(),
                    message: "exists".into(),
                },
                ErrorCode::AlreadyExists,
            ),
            (
                QueryError::Unprepared {
                    id: Bytes::from_static(&[1, 2]),
                },
                ErrorCode::Unprepared,
            ),
            (
                QueryError::Unauthorized("u".into()),
                ErrorCode::Unauthorized,
            ),
            (QueryError::Config("c".into()), ErrorCode::ConfigError),
            (QueryError::Truncate("t".into()), ErrorCode::TruncateError),
            (
                QueryError::Unavailable {
                    consistency: 4,
                    required: 2,
                    alive: 1,
                },
                ErrorCode::Unavailable,
            ),
            (
                QueryError::WriteTimeout {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    write_kind: WriteKind::Simple,
                },
                ErrorCode::WriteTimeout,
            ),
            (
                QueryError::ReadTimeout {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    data_present: false,
                },
                ErrorCode::ReadTimeout,
            ),
            (
                QueryError::ReadFailure {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    failures: 1,
                    data_present: false,
                },
                ErrorCode::ReadFailure,
            ),
            (QueryError::Overloaded("o".into()), ErrorCode::Overloaded),
            (
                QueryError::WriteFailure {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    write_kind: WriteKind::Batch,
                    message: "f".into(),
                },
                ErrorCode::WriteFailure,
            ),
            (QueryError::Server("x".into()), ErrorCode::ServerError),
            (
                QueryError::FunctionFailure {
                    keyspace: "system".into(),
                    function: "fromjson".into(),
                    arg_types: vec!["text".into()],
                    message: "m".into(),
                },
                ErrorCode::FunctionFailure,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(query_error(&e, None).code(), code, "{e:?}");
        }
    }

    #[test]
    fn bodies_carry_their_fields() {
        let r = query_error(
            &QueryError::Unprepared {
                id: Bytes::from_static(&[0xab, 0xcd]),
            },
            None,
        );
        assert_eq!(
            r.kind,
            ErrorKind::Unprepared {
                id: Bytes::from_static(&[0xab, 0xcd])
            }
        );
        assert!(r.message.contains("abcd"), "{}", r.message);
        let r = query_error(
            &QueryError::Unavailable {
                consistency: 6,
                required: 3,
                alive: 1,
            },
            None,
        );
        assert_eq!(
            r.kind,
            ErrorKind::Unavailable {
                consistency: Consistency::LocalQuorum,
                required: 3,
                alive: 1
            }
        );
        let r = query_error(
            &QueryError::AlreadyExists {
                keyspace: "ks".into(),
                table: String::new(),
                message: "Keyspace ks already exists".into(),
            },
            None,
        );
        assert_eq!(r.message, "Keyspace ks already exists");
        assert_eq!(
            r.kind,
            ErrorKind::AlreadyExists {
                keyspace: "ks".into(),
                table: String::new()
            }
        );
        let here: std::net::IpAddr = [10, 0, 0, 7].into();
        let r = query_error(
            &QueryError::ReadFailure {
                consistency: 1,
                received: 0,
                block_for: 1,
                failures: 1,
                data_present: false,
            },
            Some(here),
        );
        let ErrorKind::ReadFailure { failures, .. } = r.kind else {
            panic!("not a ReadFailure: {:?}", r.kind);
        };
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].endpoint, here);
        let d = decode_error(&DecodeError::InvalidUtf8 { valid_up_to: 3 });
        assert_eq!(d.code(), ErrorCode::ProtocolError);
    }
}
