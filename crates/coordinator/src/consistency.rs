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
///
/// Decided from the replication factors' sums alone (no per-DC list, no error built):
/// this runs on every PREPARE and every unprepared write.
pub fn accepted(ks: Option<&KeyspaceDef>, is_write: bool) -> u32 {
    let all = (ANY..=LOCAL_ONE).fold(0, |mask, cl| mask | 1 << cl);
    let Some(ks) = ks else { return all };
    let rf = RfSummary::of(ks);
    (ANY..=LOCAL_ONE)
        .filter(|cl| rf.accepts(*cl, is_write))
        .fold(0, |mask, cl| mask | 1 << cl)
}

/// What [`verdict`] needs to know of a keyspace's replication to accept or refuse a level.
struct RfSummary {
    total: u32,
    local: u32,
    /// Whether some data center with RF > 0 cannot reach its quorum (EACH_QUORUM).
    each_quorum_short: bool,
}

impl RfSummary {
    /// The same factors as [`rf_by_dc`], summed in one pass.
    fn of(ks: &KeyspaceDef) -> RfSummary {
        let class = ks
            .replication
            .get("class")
            .map(String::as_str)
            .unwrap_or_default();
        let one_dc = |rf: u32| RfSummary {
            total: rf,
            local: rf,
            each_quorum_short: rf > 0 && u32::from(rf > 0) < quorum(rf),
        };
        if class.ends_with("NetworkTopologyStrategy") {
            let mut s = RfSummary {
                total: 0,
                local: 0,
                each_quorum_short: false,
            };
            for (dc, v) in ks.replication.iter().filter(|(k, _)| k.as_str() != "class") {
                let rf: u32 = v.parse().unwrap_or(0);
                s.total = s.total.saturating_add(rf);
                // Map keys are unique: the local DC's entry is its whole factor, and its
                // one live replica exists when that factor is > 0; other DCs have none.
                let alive = if dc == LOCAL_DC {
                    s.local += rf;
                    u32::from(rf > 0)
                } else {
                    0
                };
                s.each_quorum_short |= rf > 0 && alive < quorum(rf);
            }
            s
        } else if class.ends_with("EverywhereStrategy") {
            one_dc(1)
        } else {
            one_dc(
                ks.replication
                    .get("replication_factor")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            )
        }
    }

    /// Whether [`verdict`] accepts `cl` (kept equal to it by a test).
    fn accepts(&self, cl: ConsistencyCode, is_write: bool) -> bool {
        if cl == ANY && !is_write {
            return false;
        }
        if matches!(cl, SERIAL | LOCAL_SERIAL) && is_write {
            return false;
        }
        let alive = u32::from(self.local > 0);
        let required = match cl {
            ANY => return true,
            ONE | LOCAL_ONE => 1,
            TWO => 2,
            THREE => 3,
            QUORUM | SERIAL => quorum(self.total),
            ALL => self.total,
            LOCAL_QUORUM | LOCAL_SERIAL => quorum(self.local),
            EACH_QUORUM => return !self.each_quorum_short,
            _ => return false,
        };
        !(alive < required || required == 0)
    }
}

/// Whether `cl` is in a mask from [`accepted`]: the per-request check of a cached plan,
/// with no schema lookup. A level outside it goes to [`check`] for its error.
pub fn is_accepted(accepted: u32, cl: ConsistencyCode) -> bool {
    cl < 32 && accepted & (1 << cl) != 0
}

/// [`check`] answered from `accepted` (a mask from [`accepted`] for the same keyspace);
/// a level outside it is checked again, for its error.
pub fn check_accepted(
    accepted: u32,
    ks: Option<&KeyspaceDef>,
    cl: ConsistencyCode,
    is_write: bool,
) -> Result<(), QueryError> {
    if is_accepted(accepted, cl) {
        return Ok(());
    }
    check(ks, cl, is_write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyspace(replication: &[(&str, &str)]) -> KeyspaceDef {
        KeyspaceDef::empty(
            "ks".into(),
            replication
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            true,
        )
    }

    /// The mask holds exactly the levels `check` accepts: a level missing from it would
    /// still be answered right (by `check_accepted`'s fallback), only slower.
    #[test]
    fn accepted_mask_is_exactly_the_levels_check_accepts() {
        const SIMPLE: &str = "org.apache.cassandra.locator.SimpleStrategy";
        const NTS: &str = "org.apache.cassandra.locator.NetworkTopologyStrategy";
        let cases: Vec<Vec<(&str, &str)>> = vec![
            vec![("class", SIMPLE), ("replication_factor", "1")],
            vec![("class", SIMPLE), ("replication_factor", "2")],
            vec![("class", SIMPLE), ("replication_factor", "3")],
            vec![("class", SIMPLE), ("replication_factor", "0")],
            vec![("class", SIMPLE), ("replication_factor", "x")],
            vec![("class", SIMPLE)],
            vec![("class", "org.apache.cassandra.locator.EverywhereStrategy")],
            vec![("class", NTS), ("datacenter1", "1")],
            vec![("class", NTS), ("datacenter1", "2")],
            vec![("class", NTS), ("datacenter1", "0"), ("dc2", "1")],
            vec![("class", NTS), ("datacenter1", "1"), ("dc2", "3")],
            vec![("class", NTS), ("datacenter1", "1"), ("dc2", "0")],
            vec![("class", NTS), ("dc2", "2")],
            vec![("class", NTS)],
        ];
        let mut accepted_somewhere = 0u32;
        for case in &cases {
            let ks = keyspace(case);
            for is_write in [false, true] {
                let mask = accepted(Some(&ks), is_write);
                accepted_somewhere |= mask;
                for cl in 0..=12u16 {
                    let in_mask = cl < 32 && mask & (1 << cl) != 0;
                    assert_eq!(
                        in_mask,
                        check(Some(&ks), cl, is_write).is_ok(),
                        "{case:?} cl {cl} write {is_write}"
                    );
                }
            }
        }
        assert_ne!(accepted_somewhere & (1 << EACH_QUORUM), 0);
        assert_ne!(accepted_somewhere & (1 << QUORUM), 0);
        assert_eq!(accepted(None, false), (1 << (LOCAL_ONE + 1)) - 1);
    }
}
