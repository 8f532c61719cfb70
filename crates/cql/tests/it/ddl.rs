//! DDL, roles and permissions.

use crate::p;
use amphora_cql::*;

fn qn(n: &str) -> QualifiedName {
    QualifiedName::new(None, Ident::new(n))
}

fn native(n: NativeType) -> TypeExpr {
    TypeExpr::Native(n)
}

#[test]
fn keyspaces() {
    assert!(matches!(
        p(
            "CREATE KEYSPACE ks WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}"
        ),
        Statement::CreateKeyspace(_)
    ));
    let Statement::AlterKeyspace(a) = p(
        "ALTER KEYSPACE IF EXISTS ks WITH durable_writes = false AND tablets = {'enabled': false}",
    ) else {
        panic!()
    };
    assert!(a.if_exists);
    assert_eq!(
        a.properties[1].value.as_map(),
        Some(vec![("enabled".into(), "false".into())])
    );
    let Statement::DropKeyspace(d) = p("DROP KEYSPACE IF EXISTS \"Ks\"") else {
        panic!()
    };
    assert!(d.if_exists);
    assert_eq!(d.name.name, Ident::quoted("Ks"));
    assert!(matches!(
        p("CREATE SCHEMA ks WITH replication = {'class': 'SimpleStrategy'}"),
        Statement::CreateKeyspace(_)
    ));
}

#[test]
fn every_type() {
    let Statement::CreateTable(t) = p(
        "CREATE TABLE t (k int PRIMARY KEY, a ascii, b bigint, c blob, d boolean, e counter, f date, g decimal, h double, \
         i duration, j float, l inet, m smallint, n text, o time, p timestamp, q timeuuid, r tinyint, s uuid, u varchar, v varint, \
         w list<int>, x set<frozen<tuple<int, text>>>, y map<text, frozen<list<int>>>, z frozen<address>, za ks.address, \
         zb vector<float, 3>, zc 'org.apache.cassandra.db.marshal.BytesType', zd tuple<int>, ze int STATIC)",
    ) else {
        panic!()
    };
    let tys: Vec<String> = t.columns.iter().map(|c| c.ty.to_string()).collect();
    assert_eq!(
        tys,
        [
            "int",
            "ascii",
            "bigint",
            "blob",
            "boolean",
            "counter",
            "date",
            "decimal",
            "double",
            "duration",
            "float",
            "inet",
            "smallint",
            "text",
            "time",
            "timestamp",
            "timeuuid",
            "tinyint",
            "uuid",
            "varchar",
            "varint",
            "list<int>",
            "set<frozen<tuple<int, text>>>",
            "map<text, frozen<list<int>>>",
            "frozen<address>",
            "ks.address",
            "vector<float, 3>",
            "'org.apache.cassandra.db.marshal.BytesType'",
            "tuple<int>",
            "int"
        ]
    );
    assert!(t.columns.last().expect("col").is_static);
    assert_eq!(
        t.columns[21].ty,
        TypeExpr::List(Box::new(native(NativeType::Int)))
    );
}

#[test]
fn create_table_options() {
    let Statement::CreateTable(t) = p(
        "CREATE TABLE IF NOT EXISTS ks.t (a int, b int, c text, d int, PRIMARY KEY (a, b, c)) WITH CLUSTERING ORDER BY (b DESC, c ASC) AND COMPACT STORAGE AND comment = 'x'",
    ) else {
        panic!()
    };
    assert!(t.if_not_exists);
    assert_eq!(t.primary_key.partition_key, vec![Ident::new("a")]);
    assert_eq!(
        t.primary_key.clustering_columns,
        vec![Ident::new("b"), Ident::new("c")]
    );
    assert_eq!(
        t.options.clustering_order,
        vec![
            (Ident::new("b"), Order::Desc),
            (Ident::new("c"), Order::Asc)
        ]
    );
    assert!(t.options.compact_storage);
    let Statement::CreateTable(t) = p(
        "CREATE TABLE t (a int, m text MASKED WITH mask_inner(1, null), n text MASKED WITH DEFAULT, PRIMARY KEY (a))",
    ) else {
        panic!()
    };
    assert_eq!(
        t.columns[1].mask.as_ref().expect("mask").function,
        Some(qn("mask_inner"))
    );
    assert_eq!(
        t.columns[2].mask,
        Some(ColumnMask {
            function: None,
            args: vec![]
        })
    );
    assert!(matches!(
        p("CREATE COLUMNFAMILY t (a int PRIMARY KEY)"),
        Statement::CreateTable(_)
    ));
}

#[test]
fn alter_table() {
    let act = |q: &str| match p(q) {
        Statement::AlterTable(a) => a.action,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        act("ALTER TABLE t ALTER c TYPE blob"),
        AlterTableAction::AlterColumnType {
            column: Ident::new("c"),
            ty: native(NativeType::Blob)
        }
    );
    assert!(
        matches!(act("ALTER TABLE t ADD c int"), AlterTableAction::Add { if_not_exists: false, ref columns } if columns.len() == 1)
    );
    assert!(
        matches!(act("ALTER TABLE t ADD IF NOT EXISTS (c int, d list<text> STATIC)"), AlterTableAction::Add { if_not_exists: true, ref columns } if columns.len() == 2 && columns[1].is_static)
    );
    assert_eq!(
        act("ALTER TABLE t DROP c"),
        AlterTableAction::Drop {
            if_exists: false,
            columns: vec![Ident::new("c")],
            timestamp: None
        }
    );
    assert_eq!(
        act("ALTER TABLE t DROP IF EXISTS (c, d) USING TIMESTAMP 5"),
        AlterTableAction::Drop {
            if_exists: true,
            columns: vec![Ident::new("c"), Ident::new("d")],
            timestamp: Some("5".into())
        }
    );
    assert_eq!(
        act("ALTER TABLE t RENAME a TO b AND c TO d"),
        AlterTableAction::Rename {
            if_exists: false,
            renames: vec![
                (Ident::new("a"), Ident::new("b")),
                (Ident::new("c"), Ident::new("d"))
            ]
        }
    );
    assert!(
        matches!(act("ALTER TABLE t WITH comment = 'x' AND gc_grace_seconds = 10"), AlterTableAction::With(ref p) if p.len() == 2)
    );
    assert_eq!(
        act("ALTER TABLE t DROP COMPACT STORAGE"),
        AlterTableAction::DropCompactStorage
    );
    assert!(matches!(
        act("ALTER TABLE t ALTER c MASKED WITH DEFAULT"),
        AlterTableAction::AlterColumnMask { mask: Some(_), .. }
    ));
    assert!(matches!(
        act("ALTER TABLE t ALTER c DROP MASKED"),
        AlterTableAction::AlterColumnMask { mask: None, .. }
    ));
    let Statement::AlterTable(a) = p("ALTER TABLE IF EXISTS ks.t ADD x int") else {
        panic!()
    };
    assert!(a.if_exists);
}

#[test]
fn drops_and_truncate() {
    assert!(matches!(
        p("DROP TABLE IF EXISTS ks.t"),
        Statement::DropTable(Drop {
            if_exists: true,
            ..
        })
    ));
    assert!(matches!(
        p("DROP COLUMNFAMILY t"),
        Statement::DropTable(Drop {
            if_exists: false,
            ..
        })
    ));
    assert_eq!(
        p("TRUNCATE ks.t"),
        Statement::Truncate(QualifiedName::new(Some(Ident::new("ks")), Ident::new("t")))
    );
    assert_eq!(p("TRUNCATE TABLE t"), Statement::Truncate(qn("t")));
    assert!(matches!(
        p("DROP TYPE IF EXISTS ks.address"),
        Statement::DropType(_)
    ));
    assert!(matches!(p("DROP INDEX ks.idx"), Statement::DropIndex(_)));
    assert!(matches!(
        p("DROP MATERIALIZED VIEW IF EXISTS v"),
        Statement::DropMaterializedView(_)
    ));
    assert!(
        matches!(p("DROP FUNCTION ks.f(int, text)"), Statement::DropFunction(DropFunction { arg_types: Some(ref a), .. }) if a.len() == 2)
    );
    assert!(matches!(
        p("DROP AGGREGATE IF EXISTS a"),
        Statement::DropAggregate(DropFunction {
            arg_types: None,
            if_exists: true,
            ..
        })
    ));
    assert!(matches!(
        p("DROP TRIGGER trg ON t"),
        Statement::DropTrigger { .. }
    ));
}

#[test]
fn types() {
    let Statement::CreateType(t) = p(
        "CREATE TYPE IF NOT EXISTS ks.address (street text, city text, zip int, phones set<text>)",
    ) else {
        panic!()
    };
    assert_eq!(
        t.name,
        QualifiedName::new(Some(Ident::new("ks")), Ident::new("address"))
    );
    assert_eq!(t.fields.len(), 4);
    let Statement::AlterType(a) = p("ALTER TYPE address ADD IF NOT EXISTS country text") else {
        panic!()
    };
    assert!(matches!(
        a.action,
        AlterTypeAction::Add {
            if_not_exists: true,
            ..
        }
    ));
    let Statement::AlterType(a) = p("ALTER TYPE address RENAME zip TO zipcode AND city TO town")
    else {
        panic!()
    };
    assert!(matches!(a.action, AlterTypeAction::Rename { ref renames, .. } if renames.len() == 2));
    let Statement::AlterType(a) = p("ALTER TYPE address ALTER zip TYPE varint") else {
        panic!()
    };
    assert!(matches!(a.action, AlterTypeAction::AlterField { .. }));
}

#[test]
fn indexes() {
    let ci = |q: &str| match p(q) {
        Statement::CreateIndex(i) => *i,
        other => panic!("{other:?}"),
    };
    let i = ci("CREATE INDEX IF NOT EXISTS idx ON ks.t (c)");
    assert!(i.if_not_exists && !i.custom);
    assert_eq!(i.name, Some(Ident::new("idx")));
    assert_eq!(
        i.targets,
        vec![IndexTarget {
            column: Ident::new("c"),
            kind: IndexTargetKind::Simple
        }]
    );
    assert_eq!(
        ci("CREATE INDEX ON t (keys(m))").targets[0].kind,
        IndexTargetKind::Keys
    );
    assert_eq!(
        ci("CREATE INDEX ON t (values(l))").targets[0].kind,
        IndexTargetKind::Values
    );
    assert_eq!(
        ci("CREATE INDEX ON t (entries(m))").targets[0].kind,
        IndexTargetKind::Entries
    );
    assert_eq!(
        ci("CREATE INDEX ON t (full(f))").targets[0].kind,
        IndexTargetKind::Full
    );
    assert_eq!(
        ci("CREATE INDEX ON t (keys)").targets[0],
        IndexTarget {
            column: Ident::new("keys"),
            kind: IndexTargetKind::Simple
        }
    );
    let i = ci(
        "CREATE CUSTOM INDEX ann_idx ON t (v) USING 'StorageAttachedIndex' WITH OPTIONS = {'similarity_function': 'cosine'}",
    );
    assert!(i.custom);
    assert_eq!(i.using.as_deref(), Some("StorageAttachedIndex"));
    assert_eq!(i.properties[0].name, "options");
    assert_eq!(
        ci("CREATE INDEX i ON t (c) USING 'sai'").using.as_deref(),
        Some("sai")
    );
}

#[test]
fn materialized_views() {
    let Statement::CreateMaterializedView(v) = p(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS ks.by_b AS SELECT a, b, c FROM ks.t WHERE b IS NOT NULL AND a IS NOT NULL  PRIMARY KEY (b, a) WITH CLUSTERING ORDER BY (a DESC) AND comment = 'v'",
    ) else {
        panic!()
    };
    assert_eq!(v.base_table.to_string(), "ks.t");
    assert_eq!(v.where_clause.len(), 2);
    assert_eq!(v.where_clause_text, "b IS NOT NULL AND a IS NOT NULL");
    assert_eq!(v.primary_key.partition_key, vec![Ident::new("b")]);
    assert_eq!(
        v.options.clustering_order,
        vec![(Ident::new("a"), Order::Desc)]
    );
    assert!(matches!(
        p("ALTER MATERIALIZED VIEW v WITH comment = 'x'"),
        Statement::AlterMaterializedView { .. }
    ));
    assert!(matches!(
        p("CREATE MATERIALIZED VIEW v AS SELECT * FROM t PRIMARY KEY ((a, b), c)"),
        Statement::CreateMaterializedView(_)
    ));
}

#[test]
fn functions_and_aggregates() {
    let Statement::CreateFunction(f) = p(
        "CREATE OR REPLACE FUNCTION IF NOT EXISTS ks.fLog (input double) CALLED ON NULL INPUT RETURNS double LANGUAGE java AS 'return Double.valueOf(Math.log(input.doubleValue()));'",
    ) else {
        panic!()
    };
    assert!(f.or_replace && f.if_not_exists && f.called_on_null_input);
    assert_eq!(
        f.name,
        QualifiedName::new(Some(Ident::new("ks")), Ident::new("flog"))
    );
    assert_eq!(
        f.args,
        vec![(Ident::new("input"), native(NativeType::Double))]
    );
    assert_eq!(f.language, "java");
    assert_eq!(
        f.body,
        "return Double.valueOf(Math.log(input.doubleValue()));"
    );
    let Statement::CreateFunction(f) = p(
        "CREATE FUNCTION f() RETURNS NULL ON NULL INPUT RETURNS int LANGUAGE JavaScript AS $$ 'x' + 1 $$",
    ) else {
        panic!()
    };
    assert!(!f.called_on_null_input);
    assert_eq!(f.language, "javascript");
    assert_eq!(f.body, " 'x' + 1 ");
    let Statement::CreateAggregate(a) = p(
        "CREATE AGGREGATE IF NOT EXISTS ks.average(int) SFUNC avgState STYPE tuple<int, bigint> FINALFUNC avgFinal INITCOND (0, 0)",
    ) else {
        panic!()
    };
    assert_eq!(a.arg_types, vec![native(NativeType::Int)]);
    assert_eq!(a.state_function, Ident::new("avgstate"));
    assert_eq!(a.final_function, Some(Ident::new("avgfinal")));
    assert!(matches!(a.initial_condition, Some(Expr::Tuple(_))));
}

#[test]
fn triggers() {
    let Statement::CreateTrigger(t) =
        p("CREATE TRIGGER IF NOT EXISTS trg ON ks.t USING 'org.example.Trigger'")
    else {
        panic!()
    };
    assert_eq!(t.class, "org.example.Trigger");
}

#[test]
fn roles_and_users() {
    let Statement::CreateRole(r) = p(
        "CREATE ROLE IF NOT EXISTS alice WITH PASSWORD = 'pw' AND LOGIN = true AND SUPERUSER = false AND OPTIONS = {'a': 1} \
         AND ACCESS TO DATACENTERS {'dc1', 'dc2'}",
    ) else {
        panic!()
    };
    assert_eq!(r.name, Ident::new("alice"));
    assert_eq!(
        r.options,
        vec![
            RoleOption::Password("pw".into()),
            RoleOption::Login(true),
            RoleOption::Superuser(false),
            RoleOption::Options(vec![(
                Literal::String("a".into()),
                Literal::Integer("1".into())
            )]),
            RoleOption::AccessToDatacenters(Some(vec!["dc1".into(), "dc2".into()])),
        ]
    );
    let Statement::AlterRole(r) = p(
        "ALTER ROLE 'Bob' WITH ACCESS TO ALL DATACENTERS AND HASHED PASSWORD = 'h' AND ACCESS FROM ALL CIDRS",
    ) else {
        panic!()
    };
    assert_eq!(r.name, Ident::quoted("Bob"));
    assert_eq!(r.options.len(), 3);
    assert!(matches!(
        p("DROP ROLE IF EXISTS alice"),
        Statement::DropRole {
            if_exists: true,
            ..
        }
    ));
    let Statement::CreateUser(u) = p("CREATE USER IF NOT EXISTS bob WITH PASSWORD 'x' SUPERUSER")
    else {
        panic!()
    };
    assert_eq!(
        u.options,
        vec![
            RoleOption::Password("x".into()),
            RoleOption::Superuser(true)
        ]
    );
    assert!(matches!(
        p("ALTER USER bob NOSUPERUSER"),
        Statement::AlterUser(_)
    ));
    assert!(matches!(
        p("DROP USER IF EXISTS bob"),
        Statement::DropUser { .. }
    ));
    assert_eq!(p("LIST USERS"), Statement::ListUsers);
    assert_eq!(p("LIST SUPERUSERS"), Statement::ListSuperUsers);
    assert_eq!(
        p("LIST ROLES"),
        Statement::ListRoles {
            of: None,
            recursive: true
        }
    );
    assert_eq!(
        p("LIST ROLES OF alice NORECURSIVE"),
        Statement::ListRoles {
            of: Some(Ident::new("alice")),
            recursive: false
        }
    );
    assert!(matches!(
        p("ADD IDENTITY 'spiffe://x' TO ROLE 'alice'"),
        Statement::AddIdentity { .. }
    ));
    assert!(matches!(
        p("DROP IDENTITY IF EXISTS 'spiffe://x'"),
        Statement::DropIdentity {
            if_exists: true,
            ..
        }
    ));
}

#[test]
fn permissions() {
    let Statement::GrantPermissions(g) =
        p("GRANT SELECT, MODIFY PERMISSION ON KEYSPACE ks TO alice")
    else {
        panic!()
    };
    assert_eq!(
        g.permissions,
        Some(vec![Permission::Select, Permission::Modify])
    );
    assert_eq!(g.resource, Resource::Keyspace(Ident::new("ks")));
    let Statement::RevokePermissions(r) = p("REVOKE ALL PERMISSIONS ON ALL KEYSPACES FROM alice")
    else {
        panic!()
    };
    assert_eq!(r.permissions, None);
    assert_eq!(r.resource, Resource::AllKeyspaces);
    let res = |q: &str| match p(q) {
        Statement::GrantPermissions(g) => g.resource,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        res("GRANT ALL ON TABLE ks.t TO r"),
        Resource::Table(QualifiedName::new(Some(Ident::new("ks")), Ident::new("t")))
    );
    assert_eq!(res("GRANT SELECT ON t TO r"), Resource::Table(qn("t")));
    assert_eq!(
        res("GRANT SELECT ON ALL TABLES IN KEYSPACE ks TO r"),
        Resource::AllTablesInKeyspace(Ident::new("ks"))
    );
    assert_eq!(res("GRANT AUTHORIZE ON ALL ROLES TO r"), Resource::AllRoles);
    assert_eq!(
        res("GRANT ALTER ON ROLE bob TO r"),
        Resource::Role(Ident::new("bob"))
    );
    assert_eq!(
        res("GRANT EXECUTE ON ALL FUNCTIONS TO r"),
        Resource::AllFunctions
    );
    assert_eq!(
        res("GRANT EXECUTE ON ALL FUNCTIONS IN KEYSPACE ks TO r"),
        Resource::AllFunctionsInKeyspace(Ident::new("ks"))
    );
    assert_eq!(
        res("GRANT EXECUTE ON FUNCTION ks.f(int) TO r"),
        Resource::Function {
            name: QualifiedName::new(Some(Ident::new("ks")), Ident::new("f")),
            arg_types: vec![native(NativeType::Int)]
        }
    );
    assert_eq!(
        res("GRANT DESCRIBE ON ALL MBEANS TO r"),
        Resource::AllMbeans
    );
    assert_eq!(
        res("GRANT SELECT ON MBEAN 'org.apache:type=X' TO r"),
        Resource::Mbean("org.apache:type=X".into())
    );
    assert_eq!(
        res("GRANT UNMASK ON TABLE t TO r"),
        Resource::Table(qn("t"))
    );
    assert_eq!(
        p("GRANT admin TO alice"),
        Statement::GrantRole {
            role: Ident::new("admin"),
            grantee: Ident::new("alice")
        }
    );
    assert_eq!(
        p("REVOKE admin FROM alice"),
        Statement::RevokeRole {
            role: Ident::new("admin"),
            revokee: Ident::new("alice")
        }
    );
    let Statement::ListPermissions(l) =
        p("LIST ALL PERMISSIONS ON KEYSPACE ks OF alice NORECURSIVE")
    else {
        panic!()
    };
    assert_eq!(l.permissions, None);
    assert!(!l.recursive);
    let Statement::ListPermissions(l) = p("LIST SELECT OF alice") else {
        panic!()
    };
    assert_eq!(l.permissions, Some(vec![Permission::Select]));
    assert!(matches!(p("LIST ALL"), Statement::ListPermissions(_)));
}
