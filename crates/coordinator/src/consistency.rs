//! Consistency levels against the replicas that are alive. With one node, a keyspace of
//! RF=3 has one live replica, so QUORUM (2) is Unavailable — exactly as Cassandra answers.

use crate::api::{ConsistencyCode, QueryError};
use crate::schema::KeyspaceDef;

pub const ANY: u16 = 0;
pub const ONE: u16 = 1;
pub const TWO: u16 = 2;
pub const THREE: u16 = 3;
pub const QUORUM: u16 = 4;
pub const ALL: u16 = 5;
pub const LOCAL_QUORUM: u16 = 6;
pub const EACH_QUORUM: u16 = 7;
pub const SERIAL: u16 = 8;
pub const LOCAL_SERIAL: u16 = 9;
pub const LOCAL_ONE: u16 = 10;

/// This node's data center (also in system.local).
pub const LOCAL_DC: &str = "datacenter1";

pub fn name(cl: ConsistencyCode) -> &'static str {
    match cl {
        ANY => "ANY",
        ONE => "ONE",
        TWO => "TWO",
        THREE => "THREE",
        QUORUM => "QUORUM",
        ALL => "ALL",
        LOCAL_QUORUM => "LOCAL_QUORUM",
        EACH_QUORUM => "EACH_QUORUM",
        SERIAL => "SERIAL",
        LOCAL_SERIAL => "LOCAL_SERIAL",
        LOCAL_ONE => "LOCAL_ONE",
        _ => "UNKNOWN",
    }
}

/// Replication factor per data center of a keyspace.
fn rf_by_dc(ks: &KeyspaceDef) -> Vec<(&str, u32)> {
    let class = ks
        .replication
        .get("class")
        .map(String::as_str)
        .unwrap_or_default();
    if class.ends_with("NetworkTopologyStrategy") {
        ks.replication
            .iter()
            .filter(|(k, _)| k.as_str() != "class")
            .map(|(k, v)| (k.as_str(), v.parse().unwrap_or(0)))
            .collect()
    } else if class.ends_with("EverywhereStrategy") {
        vec![(LOCAL_DC, 1)]
    } else {
        let rf = ks
            .replication
            .get("replication_factor")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        vec![(LOCAL_DC, rf)]
    }
}

fn quorum(rf: u32) -> u32 {
    rf / 2 + 1
}

/// Why a consistency level cannot be met; [`check`] turns it into the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    AnyRead,
    SerialWrite,
    Unavailable { required: u32, alive: u32 },
    Unknown,
}

/// [`check`] against a keyspace's replication factors, without building an error.
fn verdict(dcs: &[(&str, u32)], cl: ConsistencyCode, is_write: bool) -> Result<(), Refusal> {
    if cl == ANY && !is_write {
        return Err(Refusal::AnyRead);
    }
    if matches!(cl, SERIAL | LOCAL_SERIAL) && is_write {
        return Err(Refusal::SerialWrite);
    }
    let total: u32 = dcs.iter().map(|d| d.1).sum();
    let local: u32 = dcs.iter().filter(|d| d.0 == LOCAL_DC).map(|d| d.1).sum();
    // The one live node is a replica of every range when the local DC has RF >= 1.
    let alive_local = u32::from(local > 0);
    let (required, alive) = match cl {
        ANY => return Ok(()),
        ONE | LOCAL_ONE => (1, alive_local),
        TWO => (2, alive_local),
        THREE => (3, alive_local),
        QUORUM | SERIAL => (quorum(total), alive_local),
        ALL => (total, alive_local),
        LOCAL_QUORUM | LOCAL_SERIAL => (quorum(local), alive_local),
        EACH_QUORUM => {
            for &(dc, rf) in dcs {
                let alive = if dc == LOCAL_DC { alive_local } else { 0 };
                if rf > 0 && alive < quorum(rf) {
                    return Err(Refusal::Unavailable {
                        required: quorum(rf),
                        alive,
                    });
                }
            }
            return Ok(());
        }
        _ => return Err(Refusal::Unknown),
    };
    if alive < required || (required == 0 && !matches!(cl, ANY)) {
        return Err(Refusal::Unavailable {
            required: required.max(1),
            alive,
        });
    }
    Ok(())
}

/// Checks that `cl` can be met with the live replicas (this node only, for now).
pub fn check(
    ks: Option<&KeyspaceDef>,
    cl: ConsistencyCode,
    is_write: bool,
) -> Result<(), QueryError> {
    let Some(ks) = ks else { return Ok(()) };
    verdict(&rf_by_dc(ks), cl, is_write).map_err(|r| match r {
        Refusal::AnyRead => {
            QueryError::Invalid("ANY ConsistencyLevel is only supported for writes".into())
        }
        Refusal::SerialWrite => {
            QueryError::Invalid("You must use conditional updates for serializable writes".into())
        }
        Refusal::Unavailable { required, alive } => QueryError::Unavailable {
            consistency: cl,
            required: required as i32,
            alive: alive as i32,
        },
        Refusal::Unknown => QueryError::Invalid(format!("Unknown consistency level {cl}")),
    })
}

/// The consistency levels (one bit per code, ANY … LOCAL_ONE) that [`check`] accepts for
/// keyspace `ks`: computed once per prepared statement, which a keyspace change invalidates.
pub fn accepted(ks: Option<&KeyspaceDef>, is_write: bool) -> u32 {
    let all = (ANY..=LOCAL_ONE).fold(0, |mask, cl| mask | 1 << cl);
    let Some(ks) = ks else { return all };
    let dcs = rf_by_dc(ks);
    (ANY..=LOCAL_ONE)
        .filter(|cl| verdict(&dcs, *cl, is_write).is_ok())
        .fold(0, |mask, cl| mask | 1 << cl)
}

/// [`check`] answered from `accepted` (a mask from [`accepted`] for the same keyspace);
/// a level outside it is checked again, for its error.
pub fn check_accepted(
    accepted: u32,
    ks: Option<&KeyspaceDef>,
    cl: ConsistencyCode,
    is_write: bool,
) -> Result<(), QueryError> {
    if cl < 32 && accepted & (1 << cl) != 0 {
        return Ok(());
    }
    check(ks, cl, is_write)
}
