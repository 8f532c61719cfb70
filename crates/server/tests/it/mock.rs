//! A fake coordinator: answers by the query text, so the transport can be tested without
//! schema or storage.
//!
//! | query text        | answer                                                        |
//! |-------------------|---------------------------------------------------------------|
//! | `rows N`          | N rows of one int column `n` (paged by page_size)             |
//! | `USE ks`          | Set_keyspace                                                  |
//! | `keyspace`        | one text row: the connection's keyspace (or null)             |
//! | `shard`           | one int row: the shard that ran the request                   |
//! | `sleep MS`        | Void after MS milliseconds                                    |
//! | `error CODE`      | the QueryError of that name                                   |
//! | `create ks NAME`  | Schema_change CREATED KEYSPACE, also pushed as an event       |
//! | `panic`           | panics inside the request                                     |
//! | `warn N [error]`  | N client warnings `mock warning I`, then Void (or Invalid)    |
//! | `now Q`           | prepared: Q answered by `execute_now` (no future); through    |
//! |                   | `execute` (the traced path), Q plus the warning `slow path`   |
//! | anything else     | Void                                                          |

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use amphora_coordinator::{
    ClientState, NodeEvent, PreparedInfo, QueryError, QueryOptions, QueryResult, ResultColumn,
    ResultRows, SchemaChange, SchemaChangeKind, SchemaChangeTarget, WriteKind,
};
use amphora_server::transport::{Backend, BatchEntry, BatchKind, NodeFacts};
use amphora_types::CqlType;
use bytes::Bytes;
use tokio::sync::broadcast;

pub const HOST_ID: [u8; 16] = [
    0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0x4d, 0xef, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
];

fn events() -> &'static broadcast::Sender<NodeEvent> {
    static TX: OnceLock<broadcast::Sender<NodeEvent>> = OnceLock::new();
    TX.get_or_init(|| broadcast::channel(64).0)
}

thread_local! {
    static PREPARED: RefCell<HashMap<Bytes, String>> = RefCell::new(HashMap::new());
}

pub struct Mock;

pub fn local() -> Rc<Mock> {
    Rc::new(Mock)
}

fn col(name: &str, ty: CqlType) -> ResultColumn {
    ResultColumn {
        keyspace: "ks".into(),
        table: "t".into(),
        name: name.into(),
        ty,
    }
}

fn one_row(name: &str, ty: CqlType, v: Option<Bytes>) -> QueryResult {
    QueryResult::Rows(ResultRows {
        columns: Arc::new(vec![col(name, ty)]),
        cells: vec![v],
        row_count: 1,
        paging_state: None,
        no_metadata: false,
    })
}

fn run(state: &ClientState, query: &str, opts: &QueryOptions) -> Result<QueryResult, QueryError> {
    let mut words = query.split_whitespace();
    let first = words.next().unwrap_or("");
    let arg = words.next().unwrap_or("");
    Ok(match first {
        "rows" => {
            let total: i32 = arg.parse().unwrap_or(0);
            let start = opts
                .paging_state
                .as_ref()
                .and_then(|p| p.get(..4))
                .map_or(0, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            let page = opts.page_size.filter(|p| *p > 0).unwrap_or(i32::MAX);
            let end = start.saturating_add(page).min(total);
            let cells = (start..end)
                .map(|i| Some(Bytes::copy_from_slice(&i.to_be_bytes())))
                .collect::<Vec<_>>();
            QueryResult::Rows(ResultRows {
                columns: Arc::new(vec![col("n", CqlType::Int)]),
                row_count: cells.len(),
                cells,
                paging_state: (end < total).then(|| Bytes::copy_from_slice(&end.to_be_bytes())),
                no_metadata: false,
            })
        }
        "USE" => QueryResult::SetKeyspace(arg.trim_matches('"').to_string()),
        "keyspace" => one_row(
            "keyspace",
            CqlType::Text,
            state.keyspace.as_ref().map(|k| Bytes::from(k.clone())),
        ),
        "user" => one_row(
            "user",
            CqlType::Text,
            state.user.as_ref().map(|k| Bytes::from(k.clone())),
        ),
        "shard" => {
            let s = amphora_rt::current_shard().unwrap_or(u32::MAX) as i32;
            one_row(
                "shard",
                CqlType::Int,
                Some(Bytes::copy_from_slice(&s.to_be_bytes())),
            )
        }
        "error" => {
            return Err(match arg {
                "syntax" => QueryError::Syntax("line 1:0 no viable alternative".into()),
                "invalid" => QueryError::Invalid("unconfigured table x".into()),
                "exists" => QueryError::AlreadyExists {
                    keyspace: "ks".into(),
                    table: "t".into(),
                    message: "Table ks.t already exists".into(),
                },
                "timeout" => QueryError::WriteTimeout {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    write_kind: WriteKind::Simple,
                },
                _ => QueryError::Server("boom".into()),
            });
        }
        "create" => {
            let sc = SchemaChange {
                kind: SchemaChangeKind::Created,
                target: SchemaChangeTarget::Keyspace(words.next().unwrap_or("x").to_string()),
            };
            let _ = events().send(NodeEvent::SchemaChange(sc.clone()));
            QueryResult::SchemaChange(sc)
        }
        "panic" => panic!("mock: panic requested"),
        "warn" => {
            for i in 0..arg.parse::<usize>().unwrap_or(0) {
                amphora_trace::warn(format!("mock warning {i}"));
            }
            if words.next() == Some("error") {
                return Err(QueryError::Invalid("warned and failed".into()));
            }
            QueryResult::Void
        }
        _ => QueryResult::Void,
    })
}

impl Backend for Mock {
    fn node_facts(&self) -> NodeFacts {
        NodeFacts {
            host_id: HOST_ID,
            nr_shards: amphora_rt::shards().map_or(1, |s| s.nr_shards()),
            ignore_msb: 12,
        }
    }

    fn events(&self) -> broadcast::Receiver<NodeEvent> {
        events().subscribe()
    }

    async fn query(
        &self,
        state: &ClientState,
        query: &str,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        if let Some(ms) = query.strip_prefix("sleep ") {
            let ms = ms.trim().parse().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return Ok(QueryResult::Void);
        }
        run(state, query, &opts)
    }

    async fn prepare(
        &self,
        _state: &ClientState,
        query: &str,
        _keyspace: Option<&str>,
    ) -> Result<PreparedInfo, QueryError> {
        if query.starts_with("error") {
            return Err(QueryError::Syntax("bad".into()));
        }
        let id = Bytes::from(format!("id:{query}").into_bytes());
        PREPARED.with(|p| p.borrow_mut().insert(id.clone(), query.to_string()));
        let select = query.starts_with("rows") || query.starts_with("shard");
        Ok(PreparedInfo {
            id,
            result_metadata_id: Bytes::from_static(b"rmid"),
            bind_columns: Arc::new(vec![col("k", CqlType::Int), col("v", CqlType::Text)]),
            pk_indexes: vec![0],
            result_columns: Arc::new(if select {
                vec![col("n", CqlType::Int)]
            } else {
                Vec::new()
            }),
            is_lwt: query.contains(" IF "),
        })
    }

    async fn execute(
        &self,
        state: &ClientState,
        id: &[u8],
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        let q = PREPARED.with(|p| p.borrow().get(id).cloned());
        match q {
            Some(q) => match q.strip_prefix("now ") {
                Some(rest) => {
                    amphora_trace::warn("slow path");
                    run(state, rest, &opts)
                }
                None => run(state, &q, &opts),
            },
            None => Err(QueryError::Unprepared {
                id: Bytes::copy_from_slice(id),
            }),
        }
    }

    fn execute_now(
        &self,
        id: &[u8],
        opts: &QueryOptions,
    ) -> Option<Result<QueryResult, QueryError>> {
        let q = PREPARED.with(|p| p.borrow().get(id).cloned())?;
        let rest = q.strip_prefix("now ")?;
        Some(run(&ClientState::default(), rest, opts))
    }

    async fn batch(
        &self,
        _state: &ClientState,
        _kind: BatchKind,
        entries: Vec<BatchEntry>,
        _opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        if entries.is_empty() {
            return Err(QueryError::Invalid("empty batch".into()));
        }
        Ok(QueryResult::Void)
    }
}
