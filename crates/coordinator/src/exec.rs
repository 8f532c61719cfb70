//! Statement dispatch: parse → (cached) plan → run, for QUERY, PREPARE, EXECUTE and BATCH.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use amphora_cql as ast;
use bytes::Bytes;
use md5::{Digest, Md5};
use tokio::sync::broadcast;

use crate::api::*;
use crate::coordinator::{BatchItem, BatchQuery, BatchType, Coordinator, NodeInfo};
use crate::schema::{self, Schema};

/// A parsed, prepared statement (shared by every shard).
#[derive(Debug)]
pub struct PreparedStmt {
    pub query: String,
    pub keyspace: Option<String>,
    pub statement: ast::Statement,
    pub info: PreparedInfo,
    /// Names of the bind markers (for values sent by name).
    pub marker_names: Vec<Option<String>>,
    /// The table the statement reads or writes: schema changes to it invalidate the entry.
    pub table: Option<(String, String)>,
    /// What the statement resolves to against the schema, built at PREPARE (SELECT) or
    /// on the first EXECUTE (writes), never again: a change to the table drops the entry.
    pub plans: PlanCache,
}

/// A prepared statement's resolved plans (at most one of the two is used).
#[derive(Debug, Default)]
pub struct PlanCache {
    pub select: std::sync::OnceLock<Arc<crate::select::SelectPlan>>,
    pub write: std::sync::OnceLock<Arc<crate::plan::WritePlan>>,
}

/// The (keyspace, table) a DML statement addresses.
fn statement_table(st: &ast::Statement, keyspace: Option<&str>) -> Option<(String, String)> {
    let name = match st {
        ast::Statement::Select(s) => &s.table,
        ast::Statement::Insert(s) => &s.table,
        ast::Statement::Update(s) => &s.table,
        ast::Statement::Delete(s) => &s.table,
        _ => return None,
    };
    let ks = crate::plan::keyspace_of(name, keyspace).ok()?;
    Some((ks, name.name.name.clone()))
}

/// Forgets prepared statements on a changed table (or keyspace); clients re-prepare on
/// UNPREPARED and get fresh metadata, as with Cassandra.
pub fn invalidate_prepared(shared: &NodeShared, keyspace: &str, table: Option<&str>) {
    if let Ok(mut g) = shared.prepared.lock() {
        g.retain(|_, p| match &p.table {
            Some((k, t)) => !(k == keyspace && table.is_none_or(|x| x == t)),
            None => true,
        });
    }
}

/// State shared by all shards: only touched by DDL, PREPARE, and cache misses.
pub struct NodeShared {
    pub info: NodeInfo,
    /// Where the schema is kept durably (the system keyspace).
    pub schema_store: crate::schema_store::SchemaStore,
    /// The authoritative schema; DDL is serialized through this lock (never on the hot path).
    pub schema: Mutex<Arc<Schema>>,
    pub prepared: Mutex<HashMap<Bytes, Arc<PreparedStmt>>>,
    pub events: broadcast::Sender<NodeEvent>,
    pub shards: amphora_rt::Shards,
}

pub struct Inner {
    pub shared: Arc<NodeShared>,
    /// This shard's schema snapshot (replaced by DDL broadcasts).
    pub schema: RefCell<Arc<Schema>>,
    prepared: RefCell<HashMap<Bytes, Arc<PreparedStmt>, BuildHasherDefault<IdHasher>>>,
    last_timestamp: Cell<i64>,
}

/// Hashes prepared-statement ids, which are MD5 digests (already uniform): their first
/// eight bytes are the hash. Every EXECUTE looks its id up in the shard's map; SipHash cost
/// ~150 instructions there.
#[derive(Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        for (i, b) in bytes.iter().enumerate() {
            word[i % 8] ^= b;
        }
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(word);
    }
}

thread_local! {
    static LOCAL: RefCell<Option<Rc<Coordinator>>> = const { RefCell::new(None) };
}

/// This shard's coordinator (set up by the node at start).
pub fn local() -> Option<Rc<Coordinator>> {
    LOCAL.with(|l| l.borrow().clone())
}

/// Creates this shard's coordinator and makes it [`local`].
pub fn install(shared: Arc<NodeShared>) -> Rc<Coordinator> {
    let schema = shared
        .schema
        .lock()
        .map(|s| s.clone())
        .unwrap_or_else(|p| p.into_inner().clone());
    let c = Rc::new(Coordinator {
        inner: Rc::new(Inner {
            shared,
            schema: RefCell::new(schema),
            prepared: RefCell::new(HashMap::default()),
            last_timestamp: Cell::new(0),
        }),
    });
    LOCAL.with(|l| *l.borrow_mut() = Some(c.clone()));
    c
}

pub fn uninstall() {
    LOCAL.with(|l| *l.borrow_mut() = None);
}

impl Inner {
    pub fn node_info(&self) -> NodeInfo {
        self.shared.info.clone()
    }

    pub fn events(&self) -> broadcast::Receiver<NodeEvent> {
        self.shared.events.subscribe()
    }

    pub fn schema(&self) -> Arc<Schema> {
        self.schema.borrow().clone()
    }

    /// Microseconds since the epoch, strictly increasing on this shard.
    pub fn new_timestamp(&self) -> i64 {
        self.new_timestamp_at(now_micros())
    }

    /// [`new_timestamp`](Self::new_timestamp) for a clock reading the caller already took
    /// (a write reads the clock once for its `now` and its timestamp).
    pub fn new_timestamp_at(&self, now_micros: i64) -> i64 {
        let t = now_micros.max(self.last_timestamp.get() + 1);
        self.last_timestamp.set(t);
        t
    }
}

/// Runs `f` on `shard`: directly when that is the calling shard (no message, no task),
/// else by a cross-shard message.
pub async fn on_shard<F, Fut, T>(inner: &Inner, shard: u32, f: F) -> Result<T, QueryError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    if amphora_rt::current_shard() == Some(shard) {
        return Ok(f().await);
    }
    // A traced request's session follows it to the other shard (task-locals do not).
    let trace = amphora_trace::current();
    if trace.is_some() {
        amphora_trace::event(|| format!("Sending the request to shard {shard}"));
    }
    inner
        .shared
        .shards
        .submit_to(shard, move || {
            let traced = trace.is_some();
            amphora_trace::scope(trace, format!("shard {shard}"), async move {
                if traced {
                    amphora_trace::event(|| format!("Received the request on shard {shard}"));
                }
                f().await
            })
        })
        .await
        .map_err(|e| QueryError::Server(e.to_string()))
}

pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn syntax(e: ast::ParseError) -> QueryError {
    if e.kind == ast::ParseErrorKind::Invalid {
        return QueryError::Invalid(e.to_string());
    }
    QueryError::Syntax(e.to_string())
}

/// Cassandra's prepared id: MD5 of the keyspace (if any) followed by the query text.
pub fn prepared_id(keyspace: Option<&str>, query: &str) -> Bytes {
    let mut h = Md5::new();
    if let Some(k) = keyspace {
        h.update(k.as_bytes());
    }
    h.update(query.as_bytes());
    Bytes::copy_from_slice(&h.finalize())
}

pub async fn query(
    inner: &Rc<Inner>,
    state: &ClientState,
    query: &str,
    mut opts: QueryOptions,
) -> Result<QueryResult, QueryError> {
    if let Some(t) = amphora_trace::current() {
        t.set_parameter("query", query.to_string());
        t.set_parameter(
            "consistency_level",
            crate::consistency::name(opts.consistency).to_string(),
        );
        amphora_trace::event(|| format!("Parsing {query}"));
    }
    let parsed = ast::parse(query).map_err(syntax)?;
    amphora_trace::event(|| "Preparing statement".into());
    let keyspace = opts.keyspace.clone().or_else(|| state.keyspace.clone());
    let binds = bind_by_name(
        &parsed
            .bind_markers
            .iter()
            .map(|m| m.name.as_ref().map(|n| n.name.clone()))
            .collect::<Vec<_>>(),
        &mut opts,
    )?;
    run(
        inner,
        keyspace.as_deref(),
        &parsed.statement,
        &binds,
        &opts,
        None,
    )
    .await
}

/// The bound values in marker order (taken out of `opts`: nothing reads them later).
fn bind_by_name(
    marker_names: &[Option<String>],
    opts: &mut QueryOptions,
) -> Result<Vec<BoundValue>, QueryError> {
    let Some(names) = &opts.names else {
        return Ok(std::mem::take(&mut opts.values));
    };
    let mut out = Vec::with_capacity(marker_names.len());
    for m in marker_names {
        let Some(m) = m else {
            return Err(QueryError::invalid(
                "Invalid named bind marker: the statement uses positional markers",
            ));
        };
        let pos = names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(m))
            .ok_or_else(|| QueryError::invalid(format!("Missing value for bind marker :{m}")))?;
        out.push(opts.values.get(pos).cloned().unwrap_or(BoundValue::Unset));
    }
    Ok(out)
}

pub async fn prepare(
    inner: &Rc<Inner>,
    state: &ClientState,
    query: &str,
    keyspace: Option<&str>,
) -> Result<PreparedInfo, QueryError> {
    let keyspace = keyspace
        .map(str::to_string)
        .or_else(|| state.keyspace.clone());
    let id = prepared_id(keyspace.as_deref(), query);
    if let Some(p) = lookup_prepared(inner, &id) {
        return Ok(p.info.clone());
    }
    let parsed = ast::parse(query).map_err(syntax)?;
    let schema = inner.schema();
    let meta = crate::plan::bind_metadata(&schema, keyspace.as_deref(), &parsed)?;
    // A SELECT is resolved now, and its result columns are the very Arc every EXECUTE
    // returns, so the transport can encode that metadata once.
    let plans = PlanCache::default();
    let result_columns = match &parsed.statement {
        ast::Statement::Select(s) if !s.json => {
            let plan = Arc::new(crate::select::plan_select(&schema, keyspace.as_deref(), s)?);
            let cols = plan.columns.clone();
            let _ = plans.select.set(plan);
            cols
        }
        _ => Arc::new(meta.result_columns),
    };
    let info = PreparedInfo {
        id: id.clone(),
        result_metadata_id: result_metadata_id(&result_columns),
        bind_columns: Arc::new(meta.bind_columns),
        pk_indexes: meta.pk_indexes,
        result_columns,
        is_lwt: meta.is_lwt,
    };
    let table = statement_table(&parsed.statement, keyspace.as_deref());
    let stmt = Arc::new(PreparedStmt {
        table,
        plans,
        query: query.to_string(),
        keyspace,
        marker_names: parsed
            .bind_markers
            .iter()
            .map(|m| m.name.as_ref().map(|n| n.name.clone()))
            .collect(),
        statement: parsed.statement,
        info: info.clone(),
    });
    if let Ok(mut g) = inner.shared.prepared.lock() {
        g.insert(id.clone(), stmt.clone());
    }
    inner.prepared.borrow_mut().insert(id, stmt);
    Ok(info)
}

/// The v5 `result_metadata_id` of a column list (the transport compares it with the one an
/// EXECUTE sends back to set Metadata_changed).
pub fn result_metadata_id(cols: &[ResultColumn]) -> Bytes {
    let mut h = Md5::new();
    for c in cols {
        h.update(c.keyspace.as_bytes());
        h.update(c.table.as_bytes());
        h.update(c.name.as_bytes());
        h.update(c.ty.to_string().as_bytes());
    }
    Bytes::copy_from_slice(&h.finalize())
}

fn lookup_prepared(inner: &Inner, id: &[u8]) -> Option<Arc<PreparedStmt>> {
    if let Some(p) = inner.prepared.borrow().get(id) {
        return Some(p.clone());
    }
    let p = inner.shared.prepared.lock().ok()?.get(id).cloned()?;
    inner
        .prepared
        .borrow_mut()
        .insert(Bytes::copy_from_slice(id), p.clone());
    Some(p)
}

/// The partition an EXECUTE of the prepared statement `id` addresses, when
/// the statement's plan is built, its whole partition key is bound markers and this shard
/// owns the partition; `value(i)` is the i-th bound value as sent. For prefetch hints
/// only: nothing is checked here (a wrong key costs a few wasted loads; the request
/// itself reports any error).
pub(crate) fn partition_hint<'a>(
    inner: &Inner,
    id: &[u8],
    value: impl Fn(usize) -> Option<&'a [u8]>,
) -> Option<amphora_storage::PrefetchKey> {
    let prepared = inner.prepared.borrow();
    let p = prepared.get(id)?;
    let (table, read) = match (p.plans.select.get(), p.plans.write.get()) {
        (Some(s), _) => (s.table.id, true),
        (None, Some(w)) => (w.table.id, false),
        (None, None) => return None,
    };
    let token = match p.info.pk_indexes.as_slice() {
        [] => return None,
        [i] => amphora_types::token::murmur3_token(value(usize::from(*i))?),
        many => {
            let parts = many
                .iter()
                .map(|&i| value(usize::from(i)))
                .collect::<Option<Vec<_>>>()?;
            amphora_types::token::murmur3_token(&amphora_types::token::serialize_composite_key(
                &parts,
            ))
        }
    };
    let info = &inner.shared.info;
    let shard = amphora_types::token::shard_of(token, info.nr_shards, info.ignore_msb);
    (amphora_rt::current_shard() == Some(shard)).then_some(amphora_storage::PrefetchKey {
        table,
        token,
        read,
    })
}

/// Starts loading what requests for the partitions `keys` will touch on this shard (see
/// `ShardStorage::prefetch`).
pub(crate) fn prefetch(keys: &[amphora_storage::PrefetchKey]) {
    if let Ok(db) = amphora_replica::local() {
        db.prefetch(keys);
    }
}

pub async fn execute(
    inner: &Rc<Inner>,
    _state: &ClientState,
    id: &[u8],
    mut opts: QueryOptions,
) -> Result<QueryResult, QueryError> {
    let p = lookup_prepared(inner, id).ok_or_else(|| QueryError::Unprepared {
        id: Bytes::copy_from_slice(id),
    })?;
    if let Some(t) = amphora_trace::current() {
        t.set_parameter("query", p.query.clone());
        t.set_parameter(
            "consistency_level",
            crate::consistency::name(opts.consistency).to_string(),
        );
        amphora_trace::event(|| "Executing a prepared statement (not parsed again)".into());
    }
    let binds = bind_by_name(&p.marker_names, &mut opts)?;
    if binds.len() != p.marker_names.len() {
        return Err(QueryError::invalid(format!(
            "there were {} markers(?) in CQL but {} bound variables",
            p.marker_names.len(),
            binds.len()
        )));
    }
    run(
        inner,
        p.keyspace.as_deref(),
        &p.statement,
        &binds,
        &opts,
        Some(&p.plans),
    )
    .await
}

/// [`execute`] with no future, when the statement is a SELECT that
/// [`crate::select::run_select_now`] answers at once (a planned point read of a partition
/// of this shard, no wait for the disk) or a write that [`crate::write::run_write_now`]
/// applies at once (a simple write of one partition of this shard, acknowledged without a
/// sync), and the request is not traced and binds its values by position. None, with
/// nothing done, otherwise: the caller then takes [`execute`]. A write's commitlog entry is
/// handed to the OS at once, or, inside a `with_deferred_write_out` scope, left to the
/// caller, who must write it out before the answer leaves.
pub fn execute_now(
    inner: &Rc<Inner>,
    id: &[u8],
    opts: &QueryOptions,
) -> Option<Result<QueryResult, QueryError>> {
    if opts.names.is_some() || amphora_trace::current().is_some() {
        return None;
    }
    let p = lookup_prepared(inner, id)?;
    if opts.values.len() != p.marker_names.len() {
        return None;
    }
    match &p.statement {
        ast::Statement::Select(s) => {
            crate::select::run_select_now(inner, s, &opts.values, opts, &p.plans.select)
        }
        st
        @ (ast::Statement::Insert(_) | ast::Statement::Update(_) | ast::Statement::Delete(_)) => {
            crate::write::run_write_now(inner, st, &opts.values, opts, &p.plans.write)
        }
        _ => None,
    }
}

pub async fn batch(
    inner: &Rc<Inner>,
    state: &ClientState,
    kind: BatchType,
    items: Vec<BatchItem>,
    opts: QueryOptions,
) -> Result<QueryResult, QueryError> {
    let keyspace = opts.keyspace.clone().or_else(|| state.keyspace.clone());
    let mut children = Vec::with_capacity(items.len());
    for item in items {
        let (ks, stmt) = match item.query {
            BatchQuery::Text(q) => (keyspace.clone(), ast::parse(&q).map_err(syntax)?.statement),
            BatchQuery::Prepared(id) => {
                let p = lookup_prepared(inner, &id).ok_or(QueryError::Unprepared { id })?;
                (p.keyspace.clone(), p.statement.clone())
            }
        };
        let child = match stmt {
            ast::Statement::Insert(s) => ast::BatchChild::Insert(*s),
            ast::Statement::Update(s) => ast::BatchChild::Update(*s),
            ast::Statement::Delete(s) => ast::BatchChild::Delete(*s),
            other => {
                return Err(QueryError::invalid(format!(
                    "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed, got {}",
                    other.kind()
                )));
            }
        };
        children.push((ks, child, item.values));
    }
    crate::write::run_batch(inner, kind, children, &opts).await
}

/// Runs one statement.
pub async fn run(
    inner: &Rc<Inner>,
    keyspace: Option<&str>,
    st: &ast::Statement,
    binds: &[BoundValue],
    opts: &QueryOptions,
    cache: Option<&PlanCache>,
) -> Result<QueryResult, QueryError> {
    use ast::Statement as S;
    match st {
        S::Select(s) => {
            crate::select::run_select(inner, keyspace, s, binds, opts, cache.map(|c| &c.select))
                .await
        }
        S::Insert(_) | S::Update(_) | S::Delete(_) => {
            crate::write::run_write(inner, keyspace, st, binds, opts, cache.map(|c| &c.write)).await
        }
        S::Batch(b) => {
            let kind = match b.kind {
                ast::BatchKind::Logged => BatchType::Logged,
                ast::BatchKind::Unlogged => BatchType::Unlogged,
                ast::BatchKind::Counter => BatchType::Counter,
            };
            if b.using.ttl.is_some() {
                return Err(QueryError::invalid(
                    "Global TTL on the BATCH statement is not supported.",
                ));
            }
            if b.using.timestamp.is_some() && b.kind == ast::BatchKind::Counter {
                return Err(QueryError::invalid(
                    "Cannot provide custom timestamp for counter BATCH",
                ));
            }
            if b.using.timestamp.is_some() {
                for c in &b.statements {
                    let (u, conditional) = match c {
                        ast::BatchChild::Insert(s) => (&s.using, s.if_not_exists),
                        ast::BatchChild::Update(s) => (&s.using, s.conditions.is_some()),
                        ast::BatchChild::Delete(s) => (&s.using, s.conditions.is_some()),
                    };
                    if conditional {
                        return Err(QueryError::invalid(
                            "Cannot provide custom timestamp for conditional BATCH",
                        ));
                    }
                    if u.timestamp.is_some() {
                        return Err(QueryError::invalid(
                            "Timestamp must be set either on BATCH or individual statements",
                        ));
                    }
                }
            }
            let children = b
                .statements
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    if b.using.timestamp.is_some() {
                        let u = match &mut c {
                            ast::BatchChild::Insert(s) => &mut s.using,
                            ast::BatchChild::Update(s) => &mut s.using,
                            ast::BatchChild::Delete(s) => &mut s.using,
                        };
                        if u.timestamp.is_none() {
                            u.timestamp = b.using.timestamp.clone();
                        }
                    }
                    (keyspace.map(str::to_string), c, binds.to_vec())
                })
                .collect();
            Box::pin(crate::write::run_batch(inner, kind, children, opts)).await
        }
        S::Use(ks) => {
            let schema = inner.schema();
            if schema.keyspace(&ks.name).is_none() && !schema::is_system_keyspace(&ks.name) {
                return Err(QueryError::invalid(format!(
                    "Keyspace '{}' does not exist",
                    ks.name
                )));
            }
            Ok(QueryResult::SetKeyspace(ks.name.clone()))
        }
        S::Describe(d) => crate::describe::run(inner, keyspace, d, opts),
        // Rare statements are boxed, so their state does not size every request's future.
        S::Truncate(name) => Box::pin(crate::ddl::truncate(inner, keyspace, name)).await,
        S::CreateKeyspace(_)
        | S::AlterKeyspace(_)
        | S::DropKeyspace(_)
        | S::CreateTable(_)
        | S::AlterTable(_)
        | S::DropTable(_)
        | S::CreateType(_)
        | S::DropType(_)
        | S::AlterType(_)
        | S::CreateIndex(_)
        | S::DropIndex(_)
        | S::CreateMaterializedView(_)
        | S::AlterMaterializedView { .. }
        | S::DropMaterializedView(_) => Box::pin(crate::ddl::run_ddl(inner, keyspace, st)).await,
        S::CreateFunction(_) | S::CreateAggregate(_) => Err(QueryError::invalid(
            "User-defined functions are disabled in cassandra.yaml - set user_defined_functions_enabled=true to enable",
        )),
        S::DropFunction(d) | S::DropAggregate(d) => {
            if d.if_exists {
                Ok(QueryResult::Void)
            } else {
                Err(QueryError::invalid(format!(
                    "Unconfigured function {}",
                    d.name
                )))
            }
        }
        S::CreateTrigger(_) | S::DropTrigger { .. } => {
            Err(QueryError::invalid("Triggers are not supported by Amphora"))
        }
        // Cassandra's ListRolesStatement refuses the anonymous user of AllowAllAuthenticator.
        S::ListRoles { .. } | S::ListUsers | S::ListSuperUsers => Err(QueryError::Unauthorized(
            "You have to be logged in and not anonymous to perform this request".into(),
        )),
        S::CreateRole(ast::CreateRole { options, .. })
        | S::CreateUser(ast::UserStatement { options, .. })
        | S::AlterRole(ast::AlterRole { options, .. })
        | S::AlterUser(ast::UserStatement { options, .. })
            if unsupported_role_option(
                options,
                matches!(st, S::AlterRole(_) | S::AlterUser(_)),
            )
            .is_some() =>
        {
            Err(QueryError::invalid(format!(
                "org.apache.cassandra.auth.CassandraRoleManager doesn't support {}",
                unsupported_role_option(options, matches!(st, S::AlterRole(_) | S::AlterUser(_)))
                    .unwrap_or("PASSWORD")
            )))
        }
        _ => Err(QueryError::Unauthorized(format!(
            "{} requires an authorizer; Amphora runs with AllowAllAuthorizer",
            st.kind()
        ))),
    }
}

/// The first role option that Cassandra's default `CassandraRoleManager` (under
/// AllowAllAuthenticator) refuses with Invalid, once the statement passed its access check:
/// setting superuser status (any change for ALTER, `true` for CREATE) is Unauthorized first.
fn unsupported_role_option(options: &[ast::RoleOption], alter: bool) -> Option<&'static str> {
    use ast::RoleOption as O;
    if options
        .iter()
        .any(|o| matches!(o, O::Superuser(su) if alter || *su))
    {
        return None;
    }
    options.iter().find_map(|o| match o {
        O::Password(_) => Some("PASSWORD"),
        O::HashedPassword(_) => Some("HASHED_PASSWORD"),
        O::GeneratedPassword => Some("GENERATED_PASSWORD"),
        O::Options(_) => Some("OPTIONS"),
        _ => None,
    })
}

/// Publishes a new schema to every shard (their snapshots and storage tables).
pub async fn publish_schema(
    inner: &Inner,
    old: Arc<Schema>,
    new: Arc<Schema>,
) -> Result<(), QueryError> {
    let results = inner
        .shared
        .shards
        .submit_to_all(move |_shard| {
            let old = old.clone();
            let new = new.clone();
            async move { apply_schema_locally(&old, &new) }
        })
        .await
        .map_err(|e| QueryError::Server(e.to_string()))?;
    for r in results {
        r?;
    }
    Ok(())
}

/// Installs `new` on the calling shard: snapshot, then storage tables added/altered/dropped.
pub fn apply_schema_locally(old: &Schema, new: &Arc<Schema>) -> Result<(), QueryError> {
    if let Some(c) = local() {
        *c.inner.schema.borrow_mut() = new.clone();
        c.inner.prepared.borrow_mut().clear();
    }
    let db = amphora_replica::local().map_err(|e| QueryError::Server(e.to_string()))?;
    let err = |e: amphora_replica::ReplicaError| QueryError::Server(e.to_string());
    for t in new.tables() {
        match old.table_by_id(t.id) {
            None => db.add_table(t.clone()).map_err(err)?,
            Some(o) if o != t => db.alter_table(t.clone()).map_err(err)?,
            Some(_) => {}
        }
    }
    for t in old.tables() {
        if new.table_by_id(t.id).is_none() {
            db.drop_table(t.id).map_err(err)?;
        }
    }
    Ok(())
}
