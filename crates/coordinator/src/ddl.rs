//! DDL execution: build the next schema, persist it, publish it to every shard, then
//! announce it (result + SCHEMA_CHANGE event).

use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;

use crate::api::*;
use crate::exec::{Inner, publish_schema};
use crate::schema::{self, DdlOutcome};

/// Serialises DDL node-wide, from computing the next schema to publishing it on every shard,
/// so two concurrent statements (on different shards or connections) never compute from the
/// same old schema (one change would be lost) nor write the schema store at once. DDL is rare;
/// requests never take this lock.
static DDL_SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn run_ddl(
    inner: &Rc<Inner>,
    keyspace: Option<&str>,
    st: &ast::Statement,
) -> Result<QueryResult, QueryError> {
    use ast::Statement as S;
    let _serial = DDL_SERIAL.lock().await;
    // The schema lock only guards the pointer swap; DDL_SERIAL orders whole statements.
    let (old, outcome) = {
        let guard = inner
            .shared
            .schema
            .lock()
            .map_err(|_| QueryError::Server("schema lock poisoned".into()))?;
        let cur: &schema::Schema = &guard;
        let outcome: DdlOutcome = match st {
            S::CreateKeyspace(s) => schema::create_keyspace(cur, s)?,
            S::AlterKeyspace(s) => schema::alter_keyspace(cur, s)?,
            S::DropKeyspace(s) => schema::drop_keyspace(cur, s)?,
            S::CreateTable(s) => schema::create_table(cur, s, keyspace)?,
            S::AlterTable(s) => schema::alter_table(cur, s, keyspace)?,
            S::DropTable(s) => schema::drop_table(cur, s, keyspace)?,
            S::CreateType(s) => schema::create_type(cur, s, keyspace)?,
            S::DropType(s) => schema::drop_type(cur, s, keyspace)?,
            S::AlterType(s) => schema::alter_type(cur, s, keyspace)?,
            S::CreateIndex(s) => crate::index::create_index(cur, s, keyspace)?,
            S::DropIndex(s) => crate::index::drop_index(cur, s, keyspace)?,
            S::CreateMaterializedView(s) => crate::view::create_view(cur, s, keyspace)?,
            S::DropMaterializedView(s) => crate::view::drop_view(cur, s, keyspace)?,
            S::AlterMaterializedView {
                name,
                if_exists,
                properties,
            } => crate::view::alter_view(cur, name, *if_exists, properties, keyspace)?,
            other => return Err(QueryError::Server(format!("{} is not DDL", other.kind()))),
        };
        (guard.clone(), outcome)
    };
    let Some(change) = outcome.change else {
        return Ok(QueryResult::Void);
    };
    let mut new = outcome.schema;
    // The version is the digest of the stored rows (the same on every node).
    new.version = inner
        .shared
        .schema_store
        .save(&new)
        .await
        .map_err(store_error)?;
    let new = Arc::new(new);
    {
        let mut guard = inner
            .shared
            .schema
            .lock()
            .map_err(|_| QueryError::Server("schema lock poisoned".into()))?;
        *guard = new.clone();
    }
    match &change.target {
        SchemaChangeTarget::Keyspace(k) | SchemaChangeTarget::Type { keyspace: k, .. } => {
            crate::exec::invalidate_prepared(&inner.shared, k, None)
        }
        SchemaChangeTarget::Table { keyspace, table } => {
            // A base table change can change its views (columns added to `SELECT *` views).
            let has_views = new.keyspace(keyspace).is_some_and(|k| !k.views.is_empty());
            let only = if has_views {
                None
            } else {
                Some(table.as_str())
            };
            crate::exec::invalidate_prepared(&inner.shared, keyspace, only)
        }
        _ => {}
    }
    publish_schema(inner, old.clone(), new.clone()).await?;
    // A new index is filled from the data already written (writes from now on maintain it).
    if let (S::CreateIndex(ci), SchemaChangeTarget::Table { keyspace: ks, .. }) =
        (st, &change.target)
    {
        let name = new
            .keyspace(ks)
            .and_then(|k| {
                k.indexes.values().find(|i| {
                    old.keyspace(ks)
                        .is_none_or(|o| !o.indexes.contains_key(&i.name))
                })
            })
            .map(|i| i.name.clone());
        let _ = ci;
        if let Some(name) = name {
            crate::index::build(inner, &new, ks, &name).await?;
        }
    }
    if let (
        S::CreateMaterializedView(_),
        SchemaChangeTarget::Table {
            keyspace: ks,
            table,
        },
    ) = (st, &change.target)
    {
        crate::view::build(inner, &new, ks, table).await?;
    }
    let _ = inner
        .shared
        .events
        .send(NodeEvent::SchemaChange(change.clone()));
    Ok(QueryResult::SchemaChange(change))
}

pub async fn truncate(
    inner: &Rc<Inner>,
    keyspace: Option<&str>,
    name: &ast::QualifiedName,
) -> Result<QueryResult, QueryError> {
    let ks = name
        .keyspace
        .as_ref()
        .map(|k| k.name.clone())
        .or_else(|| keyspace.map(str::to_string))
        .ok_or_else(|| QueryError::invalid("No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename"))?;
    let schema = inner.schema();
    if schema.view(&ks, &name.name.name).is_some() {
        return Err(QueryError::invalid(
            "Cannot TRUNCATE materialized view directly; must truncate base table instead",
        ));
    }
    let table = schema
        .table(&ks, &name.name.name)
        .ok_or_else(|| QueryError::invalid(format!("unconfigured table {}", name.name.name)))?;
    // The table's index entries and views go with it.
    let mut ids = vec![table.id];
    if let Some(k) = schema.keyspace(&ks) {
        ids.extend(crate::index::indexes_of(k, table.id).map(|i| i.backing.id));
        ids.extend(
            k.views
                .values()
                .filter(|v| v.base == table.id)
                .map(|v| v.table.id),
        );
    }
    for id in ids {
        let results = inner
            .shared
            .shards
            .submit_to_all(move |_| async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                db.truncate(id).await.map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| QueryError::Truncate(e.to_string()))?;
        for r in results {
            r.map_err(QueryError::Truncate)?;
        }
    }
    Ok(QueryResult::Void)
}

fn store_error(e: crate::schema_store::SchemaStoreError) -> QueryError {
    QueryError::Server(format!("the schema change was not saved: {e}"))
}
