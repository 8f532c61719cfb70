//! PREPARE and EXECUTE costs of cassandra-stress's standard1 statements, without I/O:
//! planning (parse + resolve against the schema, done once per prepared statement) and
//! binding (what every EXECUTE does before the storage call: the partition key of a point
//! SELECT, the mutation of an UPDATE), against the general path each replaced.

use std::hint::black_box;

use amphora_coordinator::api::BoundValue;
use amphora_coordinator::plan::WritePlan;
use amphora_coordinator::schema::Schema;
use amphora_coordinator::values::EvalCtx;
use amphora_cql as ast;
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};

const STRESS_UPDATE: &str =
    r#"UPDATE "standard1" SET "C0" = ?,"C1" = ?,"C2" = ?,"C3" = ?,"C4" = ? WHERE KEY=?"#;
const STRESS_SELECT: &str = r#"SELECT * FROM "standard1" WHERE KEY=?"#;
/// The same write as an INSERT (what drivers' object mappers and latte's standard1 send).
const STANDARD1_INSERT: &str =
    r#"INSERT INTO "standard1" (KEY, "C0", "C1", "C2", "C3", "C4") VALUES (?, ?, ?, ?, ?, ?)"#;

fn schema() -> Schema {
    let mut s = Schema::default();
    for q in [
        "CREATE KEYSPACE keyspace1 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
        r#"CREATE TABLE keyspace1.standard1 (key blob PRIMARY KEY, "C0" blob, "C1" blob, "C2" blob, "C3" blob, "C4" blob)"#,
    ] {
        let st = ast::parse(q).expect("ddl parses").statement;
        s = match &st {
            ast::Statement::CreateKeyspace(k) => {
                amphora_coordinator::schema::create_keyspace(&s, k)
            }
            ast::Statement::CreateTable(t) => {
                amphora_coordinator::schema::create_table(&s, t, Some("keyspace1"))
            }
            _ => unreachable!("only DDL above"),
        }
        .expect("ddl applies")
        .schema;
    }
    s
}

fn bench(c: &mut Criterion) {
    let schema = schema();
    let ks = Some("keyspace1");
    let value = |n: usize| BoundValue::Set(Bytes::from(vec![7u8; n]));
    // Five 34-byte cells and a 10-byte key, as cassandra-stress's defaults.
    let update_binds: Vec<BoundValue> = (0..5).map(|_| value(34)).chain([value(10)]).collect();
    let select_binds = vec![value(10)];
    let ctx = |binds| EvalCtx {
        binds,
        now_micros: 1_700_000_000_000_000,
    };

    c.bench_function("prepare/stress_update (parse + plan)", |b| {
        b.iter(|| {
            let st = ast::parse(black_box(STRESS_UPDATE))
                .expect("parses")
                .statement;
            WritePlan::of(&schema, ks, &st).expect("plans")
        })
    });
    c.bench_function("prepare/standard1_insert (parse + plan)", |b| {
        b.iter(|| {
            let st = ast::parse(black_box(STANDARD1_INSERT))
                .expect("parses")
                .statement;
            WritePlan::of(&schema, ks, &st).expect("plans")
        })
    });
    c.bench_function("prepare/stress_select (parse + plan)", |b| {
        b.iter(|| {
            let st = ast::parse(black_box(STRESS_SELECT))
                .expect("parses")
                .statement;
            let ast::Statement::Select(s) = &st else {
                unreachable!("a SELECT")
            };
            amphora_coordinator::select::plan_select(&schema, ks, s).expect("plans")
        })
    });

    // The two halves of PREPARE apart: parsing alone, and planning a parsed statement.
    c.bench_function("prepare/stress_update: parse", |b| {
        b.iter(|| ast::parse(black_box(STRESS_UPDATE)).expect("parses"))
    });
    c.bench_function("prepare/stress_select: parse", |b| {
        b.iter(|| ast::parse(black_box(STRESS_SELECT)).expect("parses"))
    });
    let update = ast::parse(STRESS_UPDATE).expect("parses").statement;
    c.bench_function("prepare/stress_update: plan", |b| {
        b.iter(|| WritePlan::of(&schema, ks, black_box(&update)).expect("plans"))
    });
    let select = ast::parse(STRESS_SELECT).expect("parses").statement;
    let ast::Statement::Select(s) = &select else {
        unreachable!("a SELECT")
    };
    c.bench_function("prepare/stress_select: plan", |b| {
        b.iter(|| {
            amphora_coordinator::select::plan_select(&schema, ks, black_box(s)).expect("plans")
        })
    });

    let plan = WritePlan::of(&schema, ks, &update).expect("plans");
    let simple = plan
        .simple
        .as_ref()
        .expect("standard1 UPDATE is a simple write");
    c.bench_function(
        "execute/stress_update: bind + mutation (cached plan)",
        |b| {
            b.iter(|| {
                amphora_coordinator::write::plan_simple(
                    &plan.table,
                    &update,
                    simple,
                    &ctx(black_box(&update_binds)),
                    1,
                )
                .expect("binds")
            })
        },
    );
    c.bench_function(
        "execute/stress_update: bind + mutation (general path)",
        |b| {
            b.iter(|| {
                amphora_coordinator::write::plan_write(
                    &plan.table,
                    &update,
                    &ctx(black_box(&update_binds)),
                    1,
                )
                .expect("binds")
            })
        },
    );

    // What EXECUTE of a prepared standard1 INSERT does before the shard hop: the bound
    // values (10-byte key first, as the statement names it) into the partition's mutation.
    let insert = ast::parse(STANDARD1_INSERT).expect("parses").statement;
    let insert_plan = WritePlan::of(&schema, ks, &insert).expect("plans");
    let insert_simple = insert_plan
        .simple
        .as_ref()
        .expect("standard1 INSERT is a simple write");
    let insert_binds: Vec<BoundValue> = [value(10)]
        .into_iter()
        .chain((0..5).map(|_| value(34)))
        .collect();
    c.bench_function(
        "execute/standard1_insert: bind + mutation (cached plan)",
        |b| {
            b.iter(|| {
                amphora_coordinator::write::plan_simple(
                    &insert_plan.table,
                    &insert,
                    insert_simple,
                    &ctx(black_box(&insert_binds)),
                    1,
                )
                .expect("binds")
            })
        },
    );

    let plan = amphora_coordinator::select::plan_select(&schema, ks, s).expect("plans");
    let point = plan
        .point
        .as_ref()
        .expect("standard1 SELECT is a point read");
    c.bench_function("execute/stress_select: partition key (cached plan)", |b| {
        b.iter(|| {
            point
                .key(&plan.table, s, &ctx(black_box(&select_binds)))
                .expect("a key")
        })
    });
    c.bench_function("execute/stress_select: partition key (general path)", |b| {
        b.iter(|| {
            let r = amphora_coordinator::restrict::analyze(
                &plan.table,
                &s.where_clause,
                &ctx(black_box(&select_binds)),
            )
            .expect("analyzes");
            (r.slices(&plan.table), r.partition_keys().expect("a key"))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
