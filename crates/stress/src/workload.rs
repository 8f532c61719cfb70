//! The operations, on a real shard-aware driver session: cassandra-stress's predefined
//! `standard1`/`counter1` workloads and user profiles. Schema creation is here too.
//!
//! Statements, exactly as cassandra-stress sends them (`tools/stress/.../SettingsSchema.java`,
//! `predefined/CqlInserter.java`, `CqlReader.java`, `CqlCounterAdder.java`):
//! - `CREATE KEYSPACE IF NOT EXISTS "keyspace1" WITH replication = {...} AND durable_writes = true;`
//! - `CREATE TABLE IF NOT EXISTS keyspace1.standard1 (key blob PRIMARY KEY \n, "C0" blob ...) WITH compression = {};`
//! - `CREATE TABLE IF NOT EXISTS keyspace1.counter1 (key blob PRIMARY KEY,\n, "C0" counter ...) WITH compression = {};`
//! - `UPDATE "standard1" SET "C0" = ?,"C1" = ?,... WHERE KEY=?`
//! - `SELECT * FROM "standard1" WHERE KEY=?`
//! - `UPDATE "counter1" SET "C0"="C0"+?,... WHERE KEY=?`, `SELECT * FROM "counter1" WHERE KEY=?`
//!
//! All operations use prepared statements.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use scylla::client::session::Session;
use scylla::cluster::metadata::ColumnKind;
use scylla::deserialize::row::ColumnIterator;
use scylla::frame::response::result::{ColumnType, NativeType};
use scylla::statement::Consistency as DriverConsistency;
use scylla::statement::batch::{Batch, BatchType as DriverBatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{Counter, CqlValue};

use crate::distribution::{Distribution, Ratio, Rng, mix64, salt};
use crate::error::StressError;
use crate::generate::{cell_bytes_into, hex_key, hex_key_into, typed_value};
use crate::profile::{BatchType, Fields, Profile};
use crate::runner::{OpDone, Workload};
use crate::settings::{Columns, Consistency, OpKind, Population, Schema, Settings};

pub fn driver_consistency(c: Consistency) -> DriverConsistency {
    match c {
        Consistency::Any => DriverConsistency::Any,
        Consistency::One => DriverConsistency::One,
        Consistency::Two => DriverConsistency::Two,
        Consistency::Three => DriverConsistency::Three,
        Consistency::Quorum => DriverConsistency::Quorum,
        Consistency::All => DriverConsistency::All,
        Consistency::LocalQuorum => DriverConsistency::LocalQuorum,
        Consistency::EachQuorum => DriverConsistency::EachQuorum,
        Consistency::LocalOne => DriverConsistency::LocalOne,
    }
}

/// Picks partition seeds: `seq=` walks the range (wrapping), `dist=` draws.
pub struct Seeds {
    population: Population,
    next: AtomicU64,
}

impl Seeds {
    pub fn new(population: Population) -> Self {
        Self {
            population,
            next: AtomicU64::new(0),
        }
    }

    pub fn next(&self, rng: &mut Rng) -> i64 {
        match &self.population {
            Population::Seq { min, .. } => {
                let k = self.next.fetch_add(1, Ordering::Relaxed);
                *min + (k % self.population.size()) as i64
            }
            Population::Dist(d) => d.sample(rng),
        }
    }

    /// The `k`-th seed of a sequential walk, or a draw.
    pub fn at(&self, k: u64, rng: &mut Rng) -> i64 {
        match &self.population {
            Population::Seq { min, .. } => *min + (k % self.population.size()) as i64,
            Population::Dist(d) => d.sample(rng),
        }
    }

    pub fn is_seq(&self) -> bool {
        matches!(self.population, Population::Seq { .. })
    }
}

fn exec_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs one schema statement; "already exists" is fine, as for cassandra-stress.
async fn schema_statement(session: &Session, cql: &str) -> Result<(), StressError> {
    match session.query_unpaged(cql, ()).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let msg = e.to_string();
            if msg.to_ascii_lowercase().contains("already exist") {
                Ok(())
            } else {
                Err(StressError::Schema {
                    statement: cql.trim().to_string(),
                    reason: msg,
                })
            }
        }
    }
}

/// Prepares one of the run's operations. Its requests carry no driver timeout: the runner's
/// watchdog times attempts out ([`crate::runner::RunConfig::op_timeout`]), and a driver
/// timeout would register a timer for every request (~10% of the client's time at
/// saturation with the session's multi-second timer on every request).
async fn prepare(
    session: &Session,
    cql: &str,
    cl: Consistency,
) -> Result<PreparedStatement, StressError> {
    let mut p = session
        .prepare(cql)
        .await
        .map_err(|e| StressError::Schema {
            statement: cql.to_string(),
            reason: e.to_string(),
        })?;
    p.set_consistency(driver_consistency(cl));
    p.set_execution_profile_handle(Some(
        session
            .get_default_execution_profile_handle()
            .pointee_to_builder()
            .request_timeout(None)
            .build()
            .into_handle(),
    ));
    // Skip_metadata on EXECUTE, as cassandra-stress's Java driver sends it for every
    // prepared statement with result metadata: rows come back without their column specs.
    p.set_use_cached_result_metadata(true);
    Ok(p)
}

pub fn create_keyspace_cql(schema: &Schema) -> String {
    let mut s = format!(
        "CREATE KEYSPACE IF NOT EXISTS \"{}\" WITH replication = {{'class': '{}'",
        schema.keyspace, schema.replication_strategy
    );
    for (k, v) in &schema.replication_options {
        s += &format!(", '{k}' : '{v}'");
    }
    s += "} AND durable_writes = true;\n";
    s
}

fn table_options(schema: &Schema) -> String {
    let mut s = String::from(") WITH compression = {");
    if let Some(c) = &schema.compression {
        s += &format!("'class' : '{c}'");
    }
    s += "}";
    if let Some((strategy, opts)) = &schema.compaction {
        s += &format!(" AND compaction = {{ 'class' : '{strategy}'");
        for (k, v) in opts {
            s += &format!(", '{k}' : '{v}'");
        }
        s += "}";
    }
    s += ";\n";
    s
}

pub fn create_standard1_cql(schema: &Schema, columns: &Columns) -> String {
    let mut s = format!(
        "CREATE TABLE IF NOT EXISTS {}.standard1 (key blob PRIMARY KEY ",
        schema.keyspace
    );
    for n in &columns.names {
        s += &format!("\n, \"{n}\" blob");
    }
    s + &table_options(schema)
}

pub fn create_counter1_cql(schema: &Schema, columns: &Columns) -> String {
    let mut s = format!(
        "CREATE TABLE IF NOT EXISTS {}.counter1 (key blob PRIMARY KEY,",
        schema.keyspace
    );
    for n in &columns.names {
        s += &format!("\n, \"{n}\" counter");
    }
    s + &table_options(schema)
}

pub fn write_cql(columns: &[String]) -> String {
    let sets: Vec<String> = columns.iter().map(|c| format!("\"{c}\" = ?")).collect();
    format!("UPDATE \"standard1\" SET {} WHERE KEY=?", sets.join(","))
}

pub fn counter_write_cql(columns: &[String]) -> String {
    let sets: Vec<String> = columns
        .iter()
        .map(|c| format!("\"{c}\"=\"{c}\"+?"))
        .collect();
    format!("UPDATE \"counter1\" SET {} WHERE KEY=?", sets.join(","))
}

/// standard1 / counter1 operations.
pub struct Predefined {
    session: Arc<Session>,
    /// Write and read requests go here when set (one node, not `-mode driver`).
    pipe: Option<crate::pipeline::Pipeline>,
    consistency: u16,
    ops: Vec<OpKind>,
    /// Write statements by column count (`-col n=` may vary per partition).
    writes: HashMap<usize, PreparedStatement>,
    read: Option<PreparedStatement>,
    counter_writes: HashMap<usize, PreparedStatement>,
    counter_read: Option<PreparedStatement>,
    seeds: Seeds,
    columns: Columns,
    /// `salt(name)` of each column, in `columns.names` order.
    column_salts: Vec<u64>,
    count_salt: u64,
    add: Distribution,
}

/// A standard1 row generated into one buffer: the key, then each cell, as byte ranges.
struct RowBytes {
    buf: Vec<u8>,
    /// (start, end) of the key, then of each cell.
    ranges: Vec<(usize, usize)>,
}

impl RowBytes {
    fn part(&self, i: usize) -> &[u8] {
        self.ranges
            .get(i)
            .and_then(|&(a, b)| self.buf.get(a..b))
            .unwrap_or(&[])
    }
}

impl Predefined {
    /// Creates keyspace1, standard1 and counter1 (like cassandra-stress) and prepares `ops`.
    pub async fn setup(
        session: Arc<Session>,
        pipe: Option<crate::pipeline::Pipeline>,
        settings: &Settings,
        ops: Vec<OpKind>,
        log: &mut dyn FnMut(&str),
    ) -> Result<Self, StressError> {
        let schema = &settings.schema;
        schema_statement(&session, &create_keyspace_cql(schema)).await?;
        schema_statement(&session, &create_standard1_cql(schema, &settings.columns)).await?;
        let uses_counters = ops
            .iter()
            .any(|k| matches!(k, OpKind::CounterWrite | OpKind::CounterRead));
        match schema_statement(&session, &create_counter1_cql(schema, &settings.columns)).await {
            Ok(()) => {}
            Err(e) if !uses_counters => log(&format!("WARN: counter1 not created: {e}")),
            Err(e) => return Err(e),
        }
        log("Created keyspaces.");
        session
            .use_keyspace(&schema.keyspace, true)
            .await
            .map_err(|e| StressError::Schema {
                statement: format!("USE \"{}\"", schema.keyspace),
                reason: e.to_string(),
            })?;
        let cl = settings.consistency;
        let columns = settings.columns.clone();
        let counts: Vec<usize> =
            (columns.count.min.max(1) as usize..=columns.count.max.max(1) as usize).collect();
        let mut writes = HashMap::new();
        let mut counter_writes = HashMap::new();
        let mut read = None;
        let mut counter_read = None;
        for k in &ops {
            match k {
                OpKind::Write => {
                    for n in &counts {
                        if !writes.contains_key(n) {
                            let cql = write_cql(&columns.names[..*n]);
                            writes.insert(*n, prepare(&session, &cql, cl).await?);
                        }
                    }
                }
                OpKind::Read if read.is_none() => {
                    read = Some(
                        prepare(&session, "SELECT * FROM \"standard1\" WHERE KEY=?", cl).await?,
                    );
                }
                OpKind::CounterWrite => {
                    for n in &counts {
                        if !counter_writes.contains_key(n) {
                            let cql = counter_write_cql(&columns.names[..*n]);
                            counter_writes.insert(*n, prepare(&session, &cql, cl).await?);
                        }
                    }
                }
                OpKind::CounterRead if counter_read.is_none() => {
                    counter_read = Some(
                        prepare(&session, "SELECT * FROM \"counter1\" WHERE KEY=?", cl).await?,
                    );
                }
                _ => {}
            }
        }
        Ok(Self {
            session,
            pipe,
            consistency: cl.wire_code(),
            ops,
            writes,
            read,
            counter_writes,
            counter_read,
            seeds: Seeds::new(settings.population.clone()),
            column_salts: columns.names.iter().map(|n| salt(n)).collect(),
            count_salt: salt("count"),
            columns,
            add: settings.counter_add.clone(),
        })
    }

    fn column_count(&self, seed: i64) -> usize {
        let d = &self.columns.count;
        (d.value_at(0, mix64(seed as u64 ^ self.count_salt)).max(1) as usize)
            .min(self.columns.names.len())
    }

    /// The key and the first `n` cells of the row of `seed`, in two allocations.
    fn row_bytes(&self, seed: i64, n: usize) -> RowBytes {
        let key_len = crate::settings::KEY_SIZE_BYTES;
        let mut buf = Vec::with_capacity(key_len + n * (self.columns.size.max.max(0) as usize + 8));
        let mut ranges = Vec::with_capacity(n + 1);
        hex_key_into(seed, key_len, &mut buf);
        ranges.push((0, buf.len()));
        for salt in &self.column_salts[..n] {
            let start = buf.len();
            cell_bytes_into(seed, *salt, &self.columns.size, &mut buf);
            ranges.push((start, buf.len()));
        }
        RowBytes { buf, ranges }
    }

    async fn op(&self, kind: OpKind, rng: &mut Rng) -> Result<OpDone, String> {
        let seed = self.seeds.next(rng);
        match kind {
            OpKind::Write => {
                let n = self.column_count(seed);
                let stmt = self.writes.get(&n).ok_or("no write statement prepared")?;
                let row = self.row_bytes(seed, n);
                // Cells in column order, then the key (the statement's marker order).
                let mut values: Vec<&[u8]> = (1..=n).map(|i| row.part(i)).collect();
                values.push(row.part(0));
                if let Some(pipe) = &self.pipe {
                    pipe.execute(stmt.get_id(), self.consistency, &values)
                        .await?;
                    return Ok(OpDone {
                        partitions: 1,
                        rows: 1,
                    });
                }
                self.session
                    .execute_unpaged(stmt, values)
                    .await
                    .map_err(exec_err)?;
                Ok(OpDone {
                    partitions: 1,
                    rows: 1,
                })
            }
            OpKind::CounterWrite => {
                let key = CqlValue::Blob(hex_key(seed, crate::settings::KEY_SIZE_BYTES));
                let n = self.column_count(seed);
                let stmt = self
                    .counter_writes
                    .get(&n)
                    .ok_or("no counter statement prepared")?;
                // Cassandra types the marker of `c = c + ?` as counter; some servers say bigint.
                let as_counter = stmt
                    .get_variable_col_specs()
                    .iter()
                    .next()
                    .is_none_or(|c| *c.typ() == ColumnType::Native(NativeType::Counter));
                let mut values: Vec<CqlValue> = (0..n)
                    .map(|_| {
                        let v = self.add.sample(rng);
                        if as_counter {
                            CqlValue::Counter(Counter(v))
                        } else {
                            CqlValue::BigInt(v)
                        }
                    })
                    .collect();
                values.push(key);
                self.session
                    .execute_unpaged(stmt, values)
                    .await
                    .map_err(exec_err)?;
                Ok(OpDone {
                    partitions: 1,
                    rows: 1,
                })
            }
            OpKind::Read | OpKind::CounterRead => {
                let stmt = if kind == OpKind::Read {
                    self.read.as_ref()
                } else {
                    self.counter_read.as_ref()
                }
                .ok_or("no read statement prepared")?;
                let n_cols = if kind == OpKind::Read {
                    self.column_count(seed)
                } else {
                    0
                };
                let expected = self.row_bytes(seed, n_cols);
                if kind == OpKind::Read
                    && let Some(pipe) = &self.pipe
                {
                    return self
                        .pipelined_read(pipe, stmt, seed, n_cols, &expected)
                        .await;
                }
                let res = self
                    .session
                    .execute_unpaged(stmt, (expected.part(0),))
                    .await
                    .map_err(exec_err)?;
                let rows = res.into_rows_result().map_err(exec_err)?;
                let n = rows.rows_num();
                if n == 0 {
                    return Err(no_row(seed, &expected));
                }
                if kind == OpKind::Read {
                    // Compare the raw cells of the first row with the generated bytes, by
                    // column name, without decoding the row into values.
                    let row: ColumnIterator = rows.first_row().map_err(exec_err)?;
                    self.validate(
                        row.map(|col| {
                            col.map(|c| (c.spec.name(), c.slice.map(|s| s.as_slice())))
                                .map_err(exec_err)
                        }),
                        seed,
                        n_cols,
                        &expected,
                    )?;
                }
                Ok(OpDone {
                    partitions: 1,
                    rows: n as u64,
                })
            }
        }
    }
}

/// The error of a read that found no row for `seed`.
fn no_row(seed: i64, expected: &RowBytes) -> String {
    format!(
        "Data returned was not validated: no row for seed {seed} (key {})",
        String::from_utf8_lossy(expected.part(0))
    )
}

impl Predefined {
    /// Checks a row's cells, `(column name, raw bytes)`, against the generated row of `seed`:
    /// each of its first `n_cols` columns must be there and hold the generated bytes.
    fn validate<'a>(
        &self,
        cells: impl Iterator<Item = Result<(&'a str, Option<&'a [u8]>), String>>,
        seed: i64,
        n_cols: usize,
        expected: &RowBytes,
    ) -> Result<(), String> {
        let mut matched = 0;
        for cell in cells {
            let (name, bytes) = cell?;
            let Some(i) = self.columns.names[..n_cols].iter().position(|c| c == name) else {
                continue;
            };
            if bytes != Some(expected.part(i + 1)) {
                return Err(format!(
                    "Data returned was not validated: column {} of seed {seed} differs",
                    self.columns.names[i]
                ));
            }
            matched += 1;
        }
        if matched != n_cols {
            return Err(format!(
                "Data returned was not validated: {matched} of {n_cols} columns of seed {seed} returned"
            ));
        }
        Ok(())
    }

    /// A read on the pipelined connection, validated like the driver's: every one of the
    /// row's first `n_cols` columns holds the generated bytes.
    async fn pipelined_read(
        &self,
        pipe: &crate::pipeline::Pipeline,
        stmt: &PreparedStatement,
        seed: i64,
        n_cols: usize,
        expected: &RowBytes,
    ) -> Result<OpDone, String> {
        let rows = pipe
            .execute(stmt.get_id(), self.consistency, &[expected.part(0)])
            .await?
            .rows()?;
        let n = rows.count();
        if n == 0 {
            return Err(no_row(seed, expected));
        }
        let cells = rows.first_row()?;
        let specs = stmt.get_current_result_set_col_specs();
        self.validate(
            specs
                .get()
                .iter()
                .zip(&cells)
                .map(|(spec, cell)| Ok((spec.name(), cell.as_deref()))),
            seed,
            n_cols,
            expected,
        )?;
        Ok(OpDone {
            partitions: 1,
            rows: n as u64,
        })
    }
}

impl Workload for Predefined {
    async fn execute(&self, op: usize, rng: &mut Rng) -> Result<OpDone, String> {
        let kind = *self.ops.get(op).ok_or("no such operation")?;
        self.op(kind, rng).await
    }
}

/// A column of a user profile's table, with its generators.
#[derive(Debug, Clone)]
pub struct GenColumn {
    pub name: String,
    pub typ: ColumnType<'static>,
    pub size: Distribution,
    pub population: Distribution,
    pub cluster: Distribution,
    pub salt: u64,
}

impl GenColumn {
    pub fn new(
        name: &str,
        typ: ColumnType<'static>,
        spec: Option<&crate::profile::ColumnSpec>,
    ) -> Self {
        Self {
            name: name.to_string(),
            typ,
            size: spec
                .and_then(|s| s.size.clone())
                .unwrap_or_else(|| Distribution::uniform(4, 8)),
            population: spec
                .and_then(|s| s.population.clone())
                .unwrap_or_else(|| Distribution::uniform(1, 100_000_000_000)),
            cluster: spec
                .and_then(|s| s.cluster.clone())
                .unwrap_or_else(|| Distribution::fixed(1)),
            salt: salt(name),
        }
    }

    fn value(&self, id: i64) -> Result<CqlValue, String> {
        let v = typed_value(&self.typ, id, &self.size)?;
        // Mix the column's salt into hashed types so two blob columns differ.
        Ok(match v {
            CqlValue::Blob(_) | CqlValue::Text(_) | CqlValue::Ascii(_) => {
                typed_value(&self.typ, (id as u64 ^ self.salt) as i64, &self.size)?
            }
            other => other,
        })
    }
}

/// Generates the rows of a user profile's partitions: a pure function of the seed.
#[derive(Debug, Clone)]
pub struct RowGen {
    /// pk, then ck, then regular columns.
    pub columns: Vec<GenColumn>,
    pub n_pk: usize,
    pub n_ck: usize,
    /// Bind counter increments as `counter` (Cassandra) rather than `bigint`.
    pub counter_as_counter: bool,
}

impl RowGen {
    /// Rows in the partition of `seed`: the product of the clustering columns' `cluster`.
    pub fn rows_in_partition(&self, seed: i64) -> u64 {
        self.columns[self.n_pk..self.n_pk + self.n_ck]
            .iter()
            .map(|c| c.cluster.value_at(0, seed as u64 ^ c.salt).max(1) as u64)
            .product::<u64>()
            .max(1)
    }

    /// Values of row `i` of the partition of `seed`, in column order.
    pub fn row(&self, seed: i64, i: u64) -> Result<Vec<CqlValue>, String> {
        let mut out = Vec::with_capacity(self.columns.len());
        for c in &self.columns[..self.n_pk] {
            out.push(c.value(seed)?);
        }
        // Row index in mixed radix over the clustering columns, last column fastest.
        let mut digits = vec![0u64; self.n_ck];
        let mut rest = i;
        for (j, c) in self.columns[self.n_pk..self.n_pk + self.n_ck]
            .iter()
            .enumerate()
            .rev()
        {
            let radix = c.cluster.value_at(0, seed as u64 ^ c.salt).max(1) as u64;
            digits[j] = rest % radix;
            rest /= radix;
        }
        for (j, c) in self.columns[self.n_pk..self.n_pk + self.n_ck]
            .iter()
            .enumerate()
        {
            out.push(c.value(c.population.value_at(digits[j], seed as u64 ^ c.salt))?);
        }
        for c in &self.columns[self.n_pk + self.n_ck..] {
            if c.typ == ColumnType::Native(NativeType::Counter) {
                out.push(if self.counter_as_counter {
                    CqlValue::Counter(Counter(1))
                } else {
                    CqlValue::BigInt(1)
                });
            } else {
                let key = mix64(seed as u64 ^ c.salt ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                out.push(c.value(c.population.value_at(i, key))?);
            }
        }
        Ok(out)
    }
}

/// The rows written by visit `visit` of `visits` to a partition of `total` rows.
pub fn visit_rows(total: u64, visit: u64, visits: u64) -> std::ops::Range<u64> {
    let chunk = total.div_ceil(visits.max(1)).max(1);
    let lo = (visit * chunk).min(total.saturating_sub(1));
    lo..(lo + chunk).min(total)
}

enum UserOp {
    Insert,
    Query {
        stmt: PreparedStatement,
        /// Column index for each bind marker.
        binds: Vec<usize>,
        fields: Fields,
    },
}

/// A cassandra-stress user profile's `insert` and queries.
pub struct User {
    session: Arc<Session>,
    ops: Vec<UserOp>,
    insert: PreparedStatement,
    rows: RowGen,
    counter_table: bool,
    insert_bind_order: Vec<usize>,
    partitions: Distribution,
    select: Ratio,
    visits: Option<Distribution>,
    batchtype: BatchType,
    seeds: Seeds,
    insert_seq: AtomicU64,
    query_seq: AtomicU64,
}

fn ident(name: &str) -> String {
    if name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

impl User {
    pub async fn setup(
        session: Arc<Session>,
        settings: &Settings,
        profile: &Profile,
        op_names: &[String],
        log: &mut dyn FnMut(&str),
    ) -> Result<Self, StressError> {
        let cl = settings.consistency;
        let schema_err = |reason: String| StressError::Schema {
            statement: format!("{}.{}", profile.keyspace, profile.table),
            reason,
        };
        session
            .refresh_metadata()
            .await
            .map_err(|e| schema_err(e.to_string()))?;
        let state = session.get_cluster_state();
        if state.get_keyspace(&profile.keyspace).is_none() {
            let ddl = profile.keyspace_definition.as_deref().ok_or_else(|| {
                schema_err(
                    "keyspace does not exist and the profile has no keyspace_definition".into(),
                )
            })?;
            schema_statement(&session, ddl).await?;
            log(&format!("Created schema: keyspace {}", profile.keyspace));
        }
        session
            .use_keyspace(&profile.keyspace, false)
            .await
            .map_err(|e| schema_err(e.to_string()))?;
        let table_exists = session
            .get_cluster_state()
            .get_keyspace(&profile.keyspace)
            .is_some_and(|k| k.tables.contains_key(&profile.table));
        if !table_exists {
            let ddl = profile.table_definition.as_deref().ok_or_else(|| {
                schema_err("table does not exist and the profile has no table_definition".into())
            })?;
            schema_statement(&session, ddl).await?;
            log(&format!("Created schema: table {}", profile.table));
        }
        session
            .refresh_metadata()
            .await
            .map_err(|e| schema_err(e.to_string()))?;
        let state = session.get_cluster_state();
        let table = state
            .get_keyspace(&profile.keyspace)
            .and_then(|k| k.tables.get(&profile.table))
            .ok_or_else(|| schema_err("table not found in the driver's schema metadata".into()))?;

        let mut order: Vec<String> = table.partition_key.clone();
        order.extend(table.clustering_key.iter().cloned());
        let mut regular: Vec<String> = table
            .columns
            .iter()
            .filter(|(_, c)| matches!(c.kind, ColumnKind::Regular | ColumnKind::Static))
            .map(|(n, _)| n.clone())
            .collect();
        regular.sort();
        order.extend(regular);
        let mut columns = Vec::new();
        let mut counter_table = false;
        for name in &order {
            let meta = table
                .columns
                .get(name)
                .ok_or_else(|| schema_err(format!("column {name} missing from metadata")))?;
            if meta.typ == ColumnType::Native(NativeType::Counter) {
                counter_table = true;
            }
            columns.push(GenColumn::new(name, meta.typ.clone(), profile.column(name)));
            // Check the generator can make this type before the run starts.
            columns
                .last()
                .map(|c| c.value(1))
                .transpose()
                .map_err(|e| schema_err(format!("column {name}: {e}")))?;
        }
        let n_pk = table.partition_key.len();
        let n_ck = table.clustering_key.len();
        let keyspace = ident(&profile.keyspace);
        let tname = ident(&profile.table);
        let (insert_cql, insert_bind_order) = if counter_table {
            let sets: Vec<String> = columns[n_pk + n_ck..]
                .iter()
                .map(|c| format!("{0} = {0} + ?", ident(&c.name)))
                .collect();
            let wheres: Vec<String> = columns[..n_pk + n_ck]
                .iter()
                .map(|c| format!("{} = ?", ident(&c.name)))
                .collect();
            let mut bind: Vec<usize> = (n_pk + n_ck..columns.len()).collect();
            bind.extend(0..n_pk + n_ck);
            (
                format!(
                    "UPDATE {keyspace}.{tname} SET {} WHERE {}",
                    sets.join(", "),
                    wheres.join(" AND ")
                ),
                bind,
            )
        } else {
            let names: Vec<String> = columns.iter().map(|c| ident(&c.name)).collect();
            let marks = vec!["?"; names.len()].join(", ");
            (
                format!(
                    "INSERT INTO {keyspace}.{tname} ({}) VALUES ({marks})",
                    names.join(", ")
                ),
                (0..columns.len()).collect(),
            )
        };
        let insert = prepare(&session, &insert_cql, cl).await?;
        let counter_marker_is_counter = insert
            .get_variable_col_specs()
            .iter()
            .next()
            .is_none_or(|c| *c.typ() == ColumnType::Native(NativeType::Counter));

        let mut ops = Vec::new();
        for name in op_names {
            if name == "insert" {
                ops.push(UserOp::Insert);
                continue;
            }
            let q = profile.queries.get(name).ok_or_else(|| {
                StressError::usage(format!(
                    "ops({name}=..): no such query in profile {} (queries: {})",
                    profile.path.display(),
                    profile
                        .queries
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            let stmt = prepare(&session, &q.cql, cl).await?;
            let mut binds = Vec::new();
            for spec in stmt.get_variable_col_specs().iter() {
                let idx = columns
                    .iter()
                    .position(|c| c.name == spec.name())
                    .ok_or_else(|| StressError::Schema {
                        statement: q.cql.clone(),
                        reason: format!(
                            "bind marker '{}' is not a column of {}",
                            spec.name(),
                            profile.table
                        ),
                    })?;
                binds.push(idx);
            }
            ops.push(UserOp::Query {
                stmt,
                binds,
                fields: q.fields,
            });
        }
        let batchtype = match &settings.insert.batchtype {
            Some(b) => crate::profile::parse_batchtype_override(b)
                .ok_or_else(|| StressError::usage(format!("-insert batchtype={b}: unknown")))?,
            None => profile.insert.batchtype,
        };
        let select = match &settings.insert.select_ratio {
            Some(s) => Ratio::parse(s)?,
            None => profile.insert.select.clone(),
        };
        Ok(Self {
            session,
            ops,
            insert,
            rows: RowGen {
                columns,
                n_pk,
                n_ck,
                counter_as_counter: counter_marker_is_counter,
            },
            counter_table,
            insert_bind_order,
            partitions: settings
                .insert
                .partitions
                .clone()
                .unwrap_or_else(|| profile.insert.partitions.clone()),
            select,
            visits: settings
                .insert
                .visits
                .clone()
                .or_else(|| profile.insert.visits.clone()),
            batchtype,
            seeds: Seeds::new(settings.population.clone()),
            insert_seq: AtomicU64::new(0),
            query_seq: AtomicU64::new(0),
        })
    }

    async fn insert_op(&self, rng: &mut Rng) -> Result<OpDone, String> {
        let partitions = self.partitions.sample(rng).max(1) as u64;
        let mut rows: Vec<Vec<CqlValue>> = Vec::new();
        for _ in 0..partitions {
            let (seed, visit, visits) = match &self.visits {
                Some(v) if v.max > 1 => {
                    let visits = v.max.max(1) as u64;
                    if self.seeds.is_seq() {
                        let t = self.insert_seq.fetch_add(1, Ordering::Relaxed);
                        (self.seeds.at(t / visits, rng), t % visits, visits)
                    } else {
                        (self.seeds.next(rng), rng.next_u64() % visits, visits)
                    }
                }
                _ => (self.seeds.next(rng), 0, 1),
            };
            let total = self.rows.rows_in_partition(seed);
            let range = if visits > 1 {
                visit_rows(total, visit, visits)
            } else {
                let n = ((total as f64 * self.select.sample(rng)).round() as u64).clamp(1, total);
                let lo = if n < total {
                    rng.range_inclusive(0, (total - n) as i64) as u64
                } else {
                    0
                };
                lo..lo + n
            };
            for i in range {
                let row = self.rows.row(seed, i)?;
                rows.push(
                    self.insert_bind_order
                        .iter()
                        .map(|&c| row[c].clone())
                        .collect(),
                );
            }
        }
        let n_rows = rows.len() as u64;
        if rows.len() == 1 {
            let row = rows.pop().unwrap_or_default();
            self.session
                .execute_unpaged(&self.insert, row)
                .await
                .map_err(exec_err)?;
        } else {
            let kind = match (self.counter_table, self.batchtype) {
                (true, _) | (_, BatchType::Counter) => DriverBatchType::Counter,
                (_, BatchType::Logged) => DriverBatchType::Logged,
                (_, BatchType::Unlogged) => DriverBatchType::Unlogged,
            };
            let mut batch = Batch::new(kind);
            for _ in 0..rows.len() {
                batch.append_statement(self.insert.clone());
            }
            if let Some(c) = self.insert.get_consistency() {
                batch.set_consistency(c);
            }
            self.session.batch(&batch, rows).await.map_err(exec_err)?;
        }
        Ok(OpDone {
            partitions,
            rows: n_rows,
        })
    }

    async fn query_op(
        &self,
        stmt: &PreparedStatement,
        binds: &[usize],
        fields: Fields,
        rng: &mut Rng,
    ) -> Result<OpDone, String> {
        let seed = if self.seeds.is_seq() {
            let t = self.query_seq.fetch_add(1, Ordering::Relaxed);
            self.seeds.at(t, rng)
        } else {
            self.seeds.next(rng)
        };
        let total = self.rows.rows_in_partition(seed);
        let pick = |rng: &mut Rng| rng.range_inclusive(0, total as i64 - 1) as u64;
        let same = self.rows.row(seed, pick(rng))?;
        let mut values = Vec::with_capacity(binds.len());
        for &c in binds {
            let v = match fields {
                Fields::SameRow => same[c].clone(),
                Fields::MultiRow => self.rows.row(seed, pick(rng))?[c].clone(),
            };
            values.push(v);
        }
        let res = self
            .session
            .execute_unpaged(stmt, values)
            .await
            .map_err(exec_err)?;
        let rows = match res.into_rows_result() {
            Ok(r) => r.rows_num() as u64,
            Err(_) => 0,
        };
        Ok(OpDone {
            partitions: 1,
            rows,
        })
    }
}

impl Workload for User {
    async fn execute(&self, op: usize, rng: &mut Rng) -> Result<OpDone, String> {
        match self.ops.get(op).ok_or("no such operation")? {
            UserOp::Insert => self.insert_op(rng).await,
            UserOp::Query {
                stmt,
                binds,
                fields,
            } => self.query_op(stmt, binds, *fields, rng).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{parse, shell_words};

    #[test]
    fn cassandra_stress_statements() {
        let s = parse(&shell_words("write n=1")).unwrap();
        assert_eq!(
            create_keyspace_cql(&s.schema),
            "CREATE KEYSPACE IF NOT EXISTS \"keyspace1\" WITH replication = {'class': 'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor' : '1'} AND durable_writes = true;\n"
        );
        assert_eq!(
            create_standard1_cql(&s.schema, &s.columns),
            "CREATE TABLE IF NOT EXISTS keyspace1.standard1 (key blob PRIMARY KEY \n, \"C0\" blob\n, \"C1\" blob\n, \"C2\" blob\n, \"C3\" blob\n, \"C4\" blob) WITH compression = {};\n"
        );
        assert_eq!(
            create_counter1_cql(&s.schema, &s.columns),
            "CREATE TABLE IF NOT EXISTS keyspace1.counter1 (key blob PRIMARY KEY,\n, \"C0\" counter\n, \"C1\" counter\n, \"C2\" counter\n, \"C3\" counter\n, \"C4\" counter) WITH compression = {};\n"
        );
        assert_eq!(
            write_cql(&s.columns.names),
            "UPDATE \"standard1\" SET \"C0\" = ?,\"C1\" = ?,\"C2\" = ?,\"C3\" = ?,\"C4\" = ? WHERE KEY=?"
        );
        assert_eq!(
            counter_write_cql(&s.columns.names[..2]),
            "UPDATE \"counter1\" SET \"C0\"=\"C0\"+?,\"C1\"=\"C1\"+? WHERE KEY=?"
        );
        let s = parse(&shell_words(
            "write n=1 -schema replication(factor=3) compaction(strategy=LeveledCompactionStrategy,sstable_size_in_mb=160)",
        ))
        .unwrap();
        assert!(create_keyspace_cql(&s.schema).contains("'replication_factor' : '3'"));
        assert!(create_standard1_cql(&s.schema, &s.columns).ends_with(
            "WITH compression = {} AND compaction = { 'class' : 'LeveledCompactionStrategy', 'sstable_size_in_mb' : '160'};\n"
        ));
    }

    #[test]
    fn seq_seeds_walk_and_wrap() {
        let s = Seeds::new(Population::Seq { min: 5, max: 7 });
        let mut rng = Rng::new(1);
        let got: Vec<i64> = (0..5).map(|_| s.next(&mut rng)).collect();
        assert_eq!(got, vec![5, 6, 7, 5, 6]);
    }

    /// The IoT profile's table as the driver's metadata describes it.
    fn iot_rows() -> RowGen {
        let text = include_str!("../tests/fixtures/iot-stress.yaml");
        let p = crate::profile::parse(text, std::path::Path::new("iot")).unwrap();
        let col = |n: &str, t: NativeType| GenColumn::new(n, ColumnType::Native(t), p.column(n));
        RowGen {
            columns: vec![
                col("machine_id", NativeType::Blob),
                col("time", NativeType::BigInt),
                col("machine_type", NativeType::Text),
                col("sensor_value", NativeType::Double),
                col("station_id", NativeType::Blob),
            ],
            n_pk: 1,
            n_ck: 1,
            counter_as_counter: true,
        }
    }

    #[test]
    fn iot_partitions_have_100_rows_timed_0_to_99() {
        let g = iot_rows();
        for seed in [1, 2, 14_000_000] {
            assert_eq!(g.rows_in_partition(seed), 100);
            let times: Vec<CqlValue> = (0..100)
                .map(|i| g.row(seed, i).unwrap()[1].clone())
                .collect();
            let want: Vec<CqlValue> = (0..100).map(CqlValue::BigInt).collect();
            assert_eq!(times, want);
            let r = g.row(seed, 5).unwrap();
            assert!(matches!(&r[0], CqlValue::Blob(b) if b.len() == 16));
            assert!(matches!(&r[2], CqlValue::Text(t) if (10..=20).contains(&t.len())));
            assert!(matches!(&r[3], CqlValue::Double(v) if (0.0..=1000.0).contains(v)));
            assert!(matches!(&r[4], CqlValue::Blob(b) if b.len() == 16));
            // The partition key is the same on every row, and differs between partitions.
            assert_eq!(g.row(seed, 0).unwrap()[0], g.row(seed, 99).unwrap()[0]);
            assert_ne!(g.row(seed, 0).unwrap()[0], g.row(seed + 1, 0).unwrap()[0]);
            // Deterministic: a query regenerates what an insert wrote.
            assert_eq!(g.row(seed, 42).unwrap(), g.row(seed, 42).unwrap());
        }
        // machine_type: population uniform(1..10), so at most 10 distinct values.
        let types: std::collections::HashSet<String> = (1..200)
            .flat_map(|s| (0..10).map(move |i| (s, i)))
            .filter_map(|(s, i)| match &g.row(s, i).unwrap()[2] {
                CqlValue::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        assert!(types.len() <= 10, "{}", types.len());
    }

    #[test]
    fn visits_cover_a_partition_once() {
        // visits=fixed(100) over 100 rows: one row per visit, every row once.
        let rows: Vec<u64> = (0..100).flat_map(|v| visit_rows(100, v, 100)).collect();
        assert_eq!(rows, (0..100).collect::<Vec<_>>());
        // Fewer rows than visits: never empty, never out of range.
        for v in 0..10 {
            let r = visit_rows(3, v, 10);
            assert!(!r.is_empty() && r.end <= 3, "{r:?}");
        }
        assert_eq!(visit_rows(1000, 9, 10), 900..1000);
    }

    #[test]
    fn identifiers_are_quoted_when_needed() {
        assert_eq!(ident("iot_table"), "iot_table");
        assert_eq!(ident("C0"), "\"C0\"");
        assert_eq!(ident("1x"), "\"1x\"");
    }
}
