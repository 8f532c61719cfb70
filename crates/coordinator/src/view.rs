//! Materialized views on a single node.

use std::rc::Rc;

use amphora_types::data::Mutation;

use crate::api::*;
use crate::exec::Inner;
use crate::schema::Schema;

/// Base rows a write touches, read before it is applied.
#[derive(Default)]
pub struct Pending {}

pub async fn prepare(
    _inner: &Rc<Inner>,
    _schema: &Schema,
    _base: &[&Mutation],
) -> Result<Pending, QueryError> {
    Ok(Pending {})
}

pub async fn finish(_inner: &Rc<Inner>, _schema: &Schema, _p: Pending) -> Result<(), QueryError> {
    Ok(())
}

/// DESCRIBE's CREATE MATERIALIZED VIEW statement.
pub fn view_cql(v: &crate::schema::ViewDef, base: &amphora_types::schema::TableSchema) -> String {
    let _ = base;
    format!("CREATE MATERIALIZED VIEW {};", v.table.name)
}
