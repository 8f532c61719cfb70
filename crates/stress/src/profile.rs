//! cassandra-stress user profiles (YAML): `keyspace`, `keyspace_definition`, `table`,
//! `table_definition`, `columnspec` (per column: `size`, `population`, `cluster`), `insert`
//! (`partitions`, `select` / `row-population-ratio`, `batchtype`, `visits`) and `queries`
//! (`cql`, `fields: samerow|multirow`).
//!
//! Profiles copied out of PDFs arrive with lines wrapped at column 0 (the IoT benchmark's
//! `... LIMIT` / `10`) and with `fields:` dedented to the level of the query names. When the
//! text does not parse as YAML, wrapped lines are joined back onto the line before; a string
//! entry named `fields` under `queries` sets the default `fields` of every query.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::distribution::{Distribution, Ratio};
use crate::error::StressError;

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSpec {
    pub name: String,
    pub size: Option<Distribution>,
    pub population: Option<Distribution>,
    pub cluster: Option<Distribution>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchType {
    Logged,
    Unlogged,
    Counter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    SameRow,
    MultiRow,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub cql: String,
    pub fields: Fields,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Insert {
    pub partitions: Distribution,
    pub select: Ratio,
    pub batchtype: BatchType,
    pub visits: Option<Distribution>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub path: PathBuf,
    pub keyspace: String,
    pub keyspace_definition: Option<String>,
    pub table: String,
    pub table_definition: Option<String>,
    pub columns: Vec<ColumnSpec>,
    pub insert: Insert,
    pub queries: BTreeMap<String, Query>,
}

impl Profile {
    pub fn column(&self, name: &str) -> Option<&ColumnSpec> {
        self.columns.iter().find(|c| c.name == name)
    }
}

#[derive(Debug, Deserialize)]
struct RawProfile {
    keyspace: Option<String>,
    keyspace_definition: Option<String>,
    table: Option<String>,
    table_definition: Option<String>,
    #[serde(default)]
    columnspec: Vec<RawColumn>,
    #[serde(default)]
    insert: Option<BTreeMap<String, RawScalar>>,
    #[serde(default)]
    queries: Option<BTreeMap<String, RawQuery>>,
    #[serde(default)]
    #[allow(dead_code)]
    extra_definitions: Option<Vec<String>>,
    #[serde(default)]
    #[allow(dead_code)]
    token_range_queries: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawScalar {
    Text(String),
    Int(i64),
    Float(f64),
}

impl RawScalar {
    fn text(&self) -> String {
        match self {
            RawScalar::Text(s) => s.clone(),
            RawScalar::Int(i) => i.to_string(),
            RawScalar::Float(f) => f.to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct RawColumn {
    name: String,
    size: Option<RawScalar>,
    population: Option<RawScalar>,
    cluster: Option<RawScalar>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawQuery {
    Full { cql: String, fields: Option<String> },
    Scalar(String),
}

/// Reads and parses a profile file.
pub fn load(path: &Path) -> Result<Profile, StressError> {
    let text = std::fs::read_to_string(path).map_err(|source| StressError::Io {
        what: "reading profile",
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

/// Parses profile text; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Profile, StressError> {
    let err = |reason: String| StressError::Profile {
        path: path.to_path_buf(),
        reason,
    };
    let raw: RawProfile = match serde_saphyr::from_str(text) {
        Ok(r) => r,
        Err(first) => {
            serde_saphyr::from_str(&unwrap_lines(text)).map_err(|_| err(first.to_string()))?
        }
    };
    let keyspace = raw
        .keyspace
        .ok_or_else(|| err("keyspace: is required".into()))?;
    let table = raw.table.ok_or_else(|| err("table: is required".into()))?;
    let dist = |what: &str, v: &Option<RawScalar>| -> Result<Option<Distribution>, StressError> {
        v.as_ref()
            .map(|s| Distribution::parse(&s.text()))
            .transpose()
            .map_err(|e| err(format!("{what}: {e}")))
    };
    let mut columns = Vec::new();
    for c in &raw.columnspec {
        columns.push(ColumnSpec {
            name: c.name.clone(),
            size: dist(&format!("columnspec {} size", c.name), &c.size)?,
            population: dist(&format!("columnspec {} population", c.name), &c.population)?,
            cluster: dist(&format!("columnspec {} cluster", c.name), &c.cluster)?,
        });
    }
    let mut insert = Insert {
        partitions: Distribution::fixed(1),
        select: Ratio {
            dist: Distribution::fixed(1),
            divisor: 1.0,
        },
        batchtype: BatchType::Logged,
        visits: None,
    };
    for (k, v) in raw.insert.unwrap_or_default() {
        let text = v.text();
        match k.to_ascii_lowercase().as_str() {
            "partitions" => {
                insert.partitions = Distribution::parse(&text)
                    .map_err(|e| err(format!("insert partitions: {e}")))?
            }
            "select" | "row-population-ratio" | "select-ratio" => {
                insert.select = Ratio::parse(&text).map_err(|e| err(format!("insert {k}: {e}")))?
            }
            "batchtype" => {
                insert.batchtype = parse_batchtype(&text)
                    .ok_or_else(|| err(format!("insert batchtype: unknown '{text}'")))?
            }
            "visits" => {
                insert.visits = Some(
                    Distribution::parse(&text).map_err(|e| err(format!("insert visits: {e}")))?,
                )
            }
            _ => return Err(err(format!("insert: unknown option '{k}'"))),
        }
    }
    let mut default_fields = Fields::SameRow;
    let mut pending = Vec::new();
    for (name, q) in raw.queries.unwrap_or_default() {
        match q {
            RawQuery::Full { cql, fields } => pending.push((name, cql, fields)),
            RawQuery::Scalar(v) if name == "fields" => {
                default_fields = parse_fields(&v)
                    .ok_or_else(|| err(format!("queries: fields: unknown '{v}'")))?;
            }
            RawQuery::Scalar(_) => {
                return Err(err(format!("queries: {name}: expected cql: and fields:")));
            }
        }
    }
    let mut queries = BTreeMap::new();
    for (name, cql, fields) in pending {
        let fields = match fields {
            Some(f) => parse_fields(&f)
                .ok_or_else(|| err(format!("queries: {name}: fields: unknown '{f}'")))?,
            None => default_fields,
        };
        if name == "insert" {
            return Err(err(
                "queries: 'insert' is reserved for the insert operation".into(),
            ));
        }
        queries.insert(
            name,
            Query {
                cql: cql.trim().to_string(),
                fields,
            },
        );
    }
    Ok(Profile {
        path: path.to_path_buf(),
        keyspace,
        keyspace_definition: raw.keyspace_definition.map(|s| s.trim().to_string()),
        table,
        table_definition: raw.table_definition.map(|s| s.trim().to_string()),
        columns,
        insert,
        queries,
    })
}

fn parse_batchtype(s: &str) -> Option<BatchType> {
    match s.trim().to_ascii_uppercase().as_str() {
        "LOGGED" => Some(BatchType::Logged),
        "UNLOGGED" => Some(BatchType::Unlogged),
        "COUNTER" => Some(BatchType::Counter),
        _ => None,
    }
}

pub fn parse_batchtype_override(s: &str) -> Option<BatchType> {
    parse_batchtype(s)
}

fn parse_fields(s: &str) -> Option<Fields> {
    match s.trim().to_ascii_lowercase().as_str() {
        "samerow" => Some(Fields::SameRow),
        "multirow" => Some(Fields::MultiRow),
        _ => None,
    }
}

/// Joins lines that a PDF wrapped at column 0 back onto the line before.
fn unwrap_lines(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        let trimmed = line.trim_end();
        let starts_at_col0 = !line.starts_with(' ') && !line.starts_with('\t');
        let looks_like_key = trimmed
            .split_once(':')
            .is_some_and(|(k, _)| !k.contains(' ') && !k.is_empty());
        let wrapped = starts_at_col0
            && !trimmed.is_empty()
            && !trimmed.starts_with('#')
            && !trimmed.starts_with('-')
            && !looks_like_key
            && !in_block;
        match out.last_mut() {
            Some(prev) if wrapped && !prev.trim().is_empty() => {
                prev.push(' ');
                prev.push_str(trimmed);
            }
            _ => out.push(line.to_string()),
        }
        // A literal block (`key: |`) keeps its own lines.
        if trimmed.ends_with('|') || trimmed.ends_with('>') {
            in_block = true;
        } else if starts_at_col0 && !trimmed.is_empty() {
            in_block = false;
        }
    }
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    const IOT_VERBATIM: &str = include_str!("../tests/fixtures/iot-stress.yaml");
    const IOT_CLEAN: &str = include_str!("../tests/fixtures/iot-stress-clean.yaml");

    fn check_iot(p: &Profile) {
        assert_eq!(p.keyspace, "iot_space");
        assert_eq!(p.table, "iot_table");
        assert!(
            p.keyspace_definition
                .as_deref()
                .is_some_and(|d| d.starts_with("CREATE KEYSPACE iot_space"))
        );
        let td = p.table_definition.as_deref().unwrap_or_default();
        assert!(td.contains("PRIMARY KEY (machine_id, time)"), "{td}");
        assert!(td.contains("TimeWindowCompactionStrategy"), "{td}");
        assert_eq!(p.columns.len(), 5);
        let station = p.column("station_id").unwrap();
        assert_eq!(station.size, Some(Distribution::fixed(16)));
        assert_eq!(
            station.population.as_ref().map(|d| (d.min, d.max)),
            Some((1, 5_000_000_000))
        );
        let mt = p.column("machine_type").unwrap();
        assert_eq!(mt.size, Some(Distribution::uniform(10, 20)));
        assert_eq!(mt.population, Some(Distribution::uniform(1, 10)));
        let sv = p.column("sensor_value").unwrap();
        assert!(matches!(
            sv.population.as_ref().map(|d| &d.kind),
            Some(crate::distribution::Kind::Gaussian { .. })
        ));
        let time = p.column("time").unwrap();
        assert_eq!(time.cluster, Some(Distribution::fixed(100)));
        assert_eq!(
            time.population.as_ref().map(|d| (d.min, d.max)),
            Some((0, 99))
        );
        assert_eq!(p.insert.partitions, Distribution::fixed(1));
        assert_eq!(p.insert.select.divisor, 100.0);
        assert_eq!(p.insert.batchtype, BatchType::Unlogged);
        assert_eq!(p.queries.len(), 1);
        let q = &p.queries["query_by_machine_id"];
        assert_eq!(
            q.cql,
            "SELECT machine_id, sensor_value, time FROM iot_table WHERE machine_id = ? and time >= 90 LIMIT 10"
        );
        assert_eq!(q.fields, Fields::SameRow);
    }

    #[test]
    fn iot_profile_as_printed_in_the_seed() {
        let p = parse(IOT_VERBATIM, Path::new("iot-stress.yaml")).unwrap();
        check_iot(&p);
    }

    #[test]
    fn iot_profile_repaired() {
        let p = parse(IOT_CLEAN, Path::new("iot-stress-clean.yaml")).unwrap();
        check_iot(&p);
    }

    #[test]
    fn defaults_and_errors() {
        let p = parse("keyspace: k\ntable: t\n", Path::new("x")).unwrap();
        assert_eq!(p.insert.batchtype, BatchType::Logged);
        assert!(p.queries.is_empty());
        assert!(parse("table: t\n", Path::new("x")).is_err());
        assert!(
            parse(
                "keyspace: k\ntable: t\ninsert:\n  batchtype: SOMETIMES\n",
                Path::new("x")
            )
            .is_err()
        );
        assert!(
            parse(
                "keyspace: k\ntable: t\ncolumnspec:\n  - name: a\n    size: zipf(1)\n",
                Path::new("x")
            )
            .is_err()
        );
        assert!(
            parse(
                "keyspace: k\ntable: t\nqueries:\n  q:\n    cql: SELECT 1\n    fields: everyrow\n",
                Path::new("x")
            )
            .is_err()
        );
        assert!(parse(": : :\n  - [", Path::new("x")).is_err());
    }

    #[test]
    fn unwraps_pdf_lines_only_outside_blocks() {
        let t = "a:\n  b: x LIMIT\n10\nc: |\n  keep\n";
        assert_eq!(unwrap_lines(t), "a:\n  b: x LIMIT 10\nc: |\n  keep\n");
    }
}
