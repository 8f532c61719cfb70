//! CQL keywords, from Cassandra's `Lexer.g`; which of them are unreserved (valid as
//! identifiers) follows `Parser.g`'s `unreserved_keyword` / `basic_unreserved_keyword`.

use crate::ast::NativeType;

/// A keyword token. Matching is case-insensitive; `TABLE`/`COLUMNFAMILY` and
/// `TABLES`/`COLUMNFAMILIES` are one keyword each, as in Cassandra's lexer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Keyword {
    Select,
    From,
    As,
    Where,
    And,
    Key,
    Keys,
    Entries,
    Full,
    Insert,
    Update,
    With,
    Limit,
    Per,
    Partition,
    Using,
    Use,
    Distinct,
    Count,
    Set,
    Begin,
    Unlogged,
    Batch,
    Apply,
    Truncate,
    Delete,
    In,
    Create,
    Schema,
    Keyspace,
    Keyspaces,
    Table,
    Tables,
    Materialized,
    View,
    Index,
    Custom,
    On,
    To,
    Drop,
    Primary,
    Into,
    Values,
    Timestamp,
    Ttl,
    Cast,
    Alter,
    Rename,
    Add,
    Type,
    Types,
    Compact,
    Storage,
    Order,
    By,
    Asc,
    Desc,
    Allow,
    Filtering,
    If,
    Is,
    Contains,
    Between,
    Group,
    Cluster,
    Internals,
    Only,
    Grant,
    All,
    Permission,
    Permissions,
    Of,
    Revoke,
    Modify,
    Authorize,
    Describe,
    Execute,
    Norecursive,
    Mbean,
    Mbeans,
    User,
    Users,
    Role,
    Roles,
    Superusers,
    Superuser,
    Nosuperuser,
    Generated,
    Password,
    Hashed,
    Login,
    Nologin,
    Options,
    Access,
    Datacenters,
    Cidrs,
    Identity,
    Clustering,
    Ascii,
    Bigint,
    Blob,
    Boolean,
    Counter,
    Decimal,
    Double,
    Duration,
    Float,
    Inet,
    Int,
    Smallint,
    Tinyint,
    Text,
    Uuid,
    Varchar,
    Varint,
    Timeuuid,
    Token,
    Writetime,
    Maxwritetime,
    Date,
    Time,
    Null,
    Not,
    Exists,
    Map,
    List,
    Nan,
    Infinity,
    Tuple,
    Trigger,
    Static,
    Frozen,
    Function,
    Functions,
    Aggregate,
    Aggregates,
    Sfunc,
    Stype,
    Finalfunc,
    Initcond,
    Returns,
    Called,
    Input,
    Language,
    Or,
    Replace,
    Json,
    Default,
    Unset,
    Like,
    Masked,
    Unmask,
    SelectMasked,
    Vector,
    Ann,
    Check,
    Indexes,
}

/// Sorted by spelling, for binary search.
static SPELLINGS: &[(&str, Keyword)] = &[
    ("access", Keyword::Access),
    ("add", Keyword::Add),
    ("aggregate", Keyword::Aggregate),
    ("aggregates", Keyword::Aggregates),
    ("all", Keyword::All),
    ("allow", Keyword::Allow),
    ("alter", Keyword::Alter),
    ("and", Keyword::And),
    ("ann", Keyword::Ann),
    ("apply", Keyword::Apply),
    ("as", Keyword::As),
    ("asc", Keyword::Asc),
    ("ascii", Keyword::Ascii),
    ("authorize", Keyword::Authorize),
    ("batch", Keyword::Batch),
    ("begin", Keyword::Begin),
    ("between", Keyword::Between),
    ("bigint", Keyword::Bigint),
    ("blob", Keyword::Blob),
    ("boolean", Keyword::Boolean),
    ("by", Keyword::By),
    ("called", Keyword::Called),
    ("cast", Keyword::Cast),
    ("check", Keyword::Check),
    ("cidrs", Keyword::Cidrs),
    ("cluster", Keyword::Cluster),
    ("clustering", Keyword::Clustering),
    ("columnfamilies", Keyword::Tables),
    ("columnfamily", Keyword::Table),
    ("compact", Keyword::Compact),
    ("contains", Keyword::Contains),
    ("count", Keyword::Count),
    ("counter", Keyword::Counter),
    ("create", Keyword::Create),
    ("custom", Keyword::Custom),
    ("datacenters", Keyword::Datacenters),
    ("date", Keyword::Date),
    ("decimal", Keyword::Decimal),
    ("default", Keyword::Default),
    ("delete", Keyword::Delete),
    ("desc", Keyword::Desc),
    ("describe", Keyword::Describe),
    ("distinct", Keyword::Distinct),
    ("double", Keyword::Double),
    ("drop", Keyword::Drop),
    ("duration", Keyword::Duration),
    ("entries", Keyword::Entries),
    ("execute", Keyword::Execute),
    ("exists", Keyword::Exists),
    ("filtering", Keyword::Filtering),
    ("finalfunc", Keyword::Finalfunc),
    ("float", Keyword::Float),
    ("from", Keyword::From),
    ("frozen", Keyword::Frozen),
    ("full", Keyword::Full),
    ("function", Keyword::Function),
    ("functions", Keyword::Functions),
    ("generated", Keyword::Generated),
    ("grant", Keyword::Grant),
    ("group", Keyword::Group),
    ("hashed", Keyword::Hashed),
    ("identity", Keyword::Identity),
    ("if", Keyword::If),
    ("in", Keyword::In),
    ("index", Keyword::Index),
    ("indexes", Keyword::Indexes),
    ("inet", Keyword::Inet),
    ("infinity", Keyword::Infinity),
    ("initcond", Keyword::Initcond),
    ("input", Keyword::Input),
    ("insert", Keyword::Insert),
    ("int", Keyword::Int),
    ("internals", Keyword::Internals),
    ("into", Keyword::Into),
    ("is", Keyword::Is),
    ("json", Keyword::Json),
    ("key", Keyword::Key),
    ("keys", Keyword::Keys),
    ("keyspace", Keyword::Keyspace),
    ("keyspaces", Keyword::Keyspaces),
    ("language", Keyword::Language),
    ("like", Keyword::Like),
    ("limit", Keyword::Limit),
    ("list", Keyword::List),
    ("login", Keyword::Login),
    ("map", Keyword::Map),
    ("masked", Keyword::Masked),
    ("materialized", Keyword::Materialized),
    ("maxwritetime", Keyword::Maxwritetime),
    ("mbean", Keyword::Mbean),
    ("mbeans", Keyword::Mbeans),
    ("modify", Keyword::Modify),
    ("nan", Keyword::Nan),
    ("nologin", Keyword::Nologin),
    ("norecursive", Keyword::Norecursive),
    ("nosuperuser", Keyword::Nosuperuser),
    ("not", Keyword::Not),
    ("null", Keyword::Null),
    ("of", Keyword::Of),
    ("on", Keyword::On),
    ("only", Keyword::Only),
    ("options", Keyword::Options),
    ("or", Keyword::Or),
    ("order", Keyword::Order),
    ("partition", Keyword::Partition),
    ("password", Keyword::Password),
    ("per", Keyword::Per),
    ("permission", Keyword::Permission),
    ("permissions", Keyword::Permissions),
    ("primary", Keyword::Primary),
    ("rename", Keyword::Rename),
    ("replace", Keyword::Replace),
    ("returns", Keyword::Returns),
    ("revoke", Keyword::Revoke),
    ("role", Keyword::Role),
    ("roles", Keyword::Roles),
    ("schema", Keyword::Schema),
    ("select", Keyword::Select),
    ("select_masked", Keyword::SelectMasked),
    ("set", Keyword::Set),
    ("sfunc", Keyword::Sfunc),
    ("smallint", Keyword::Smallint),
    ("static", Keyword::Static),
    ("storage", Keyword::Storage),
    ("stype", Keyword::Stype),
    ("superuser", Keyword::Superuser),
    ("superusers", Keyword::Superusers),
    ("table", Keyword::Table),
    ("tables", Keyword::Tables),
    ("text", Keyword::Text),
    ("time", Keyword::Time),
    ("timestamp", Keyword::Timestamp),
    ("timeuuid", Keyword::Timeuuid),
    ("tinyint", Keyword::Tinyint),
    ("to", Keyword::To),
    ("token", Keyword::Token),
    ("trigger", Keyword::Trigger),
    ("truncate", Keyword::Truncate),
    ("ttl", Keyword::Ttl),
    ("tuple", Keyword::Tuple),
    ("type", Keyword::Type),
    ("types", Keyword::Types),
    ("unlogged", Keyword::Unlogged),
    ("unmask", Keyword::Unmask),
    ("unset", Keyword::Unset),
    ("update", Keyword::Update),
    ("use", Keyword::Use),
    ("user", Keyword::User),
    ("users", Keyword::Users),
    ("using", Keyword::Using),
    ("uuid", Keyword::Uuid),
    ("values", Keyword::Values),
    ("varchar", Keyword::Varchar),
    ("varint", Keyword::Varint),
    ("vector", Keyword::Vector),
    ("view", Keyword::View),
    ("where", Keyword::Where),
    ("with", Keyword::With),
    ("writetime", Keyword::Writetime),
];

/// Longest keyword spelling ("columnfamilies").
const MAX_KEYWORD_LEN: usize = 14;

/// Packs up to 16 bytes, lower-cased, big-endian into a u128 (so that the order of packed
/// values is the byte order of the words, NUL-padded).
fn pack(bytes: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    let n = bytes.len().min(16);
    buf[..n].copy_from_slice(&bytes[..n]);
    buf.make_ascii_lowercase();
    u128::from_be_bytes(buf)
}

fn packed_spellings() -> &'static [(u128, Keyword)] {
    static PACKED: std::sync::OnceLock<Vec<(u128, Keyword)>> = std::sync::OnceLock::new();
    PACKED.get_or_init(|| {
        let mut v: Vec<_> = SPELLINGS
            .iter()
            .map(|&(s, k)| (pack(s.as_bytes()), k))
            .collect();
        v.sort_by_key(|&(p, _)| p);
        v
    })
}

impl Keyword {
    /// Finds the keyword for an identifier, ignoring ASCII case.
    ///
    /// PERF-CRITICAL: called for every unquoted word. The word is packed, lower-cased,
    /// into a u128 and binary-searched among the packed spellings: integer compares only.
    pub fn lookup(word: &str) -> Option<Keyword> {
        Self::lookup_bytes(word.as_bytes())
    }

    /// [`Keyword::lookup`] of a word's bytes.
    pub(crate) fn lookup_bytes(bytes: &[u8]) -> Option<Keyword> {
        if bytes.len() > MAX_KEYWORD_LEN || bytes.len() < 2 {
            return None;
        }
        let key = pack(bytes);
        let table = packed_spellings();
        table
            .binary_search_by_key(&key, |&(k, _)| k)
            .ok()
            .map(|i| table[i].1)
    }

    /// The ANTLR token name Cassandra prints in "expecting K_FROM".
    pub fn token_name(self) -> &'static str {
        match self {
            Keyword::Select => "K_SELECT",
            Keyword::From => "K_FROM",
            Keyword::As => "K_AS",
            Keyword::Where => "K_WHERE",
            Keyword::And => "K_AND",
            Keyword::Key => "K_KEY",
            Keyword::Keys => "K_KEYS",
            Keyword::Entries => "K_ENTRIES",
            Keyword::Full => "K_FULL",
            Keyword::Insert => "K_INSERT",
            Keyword::Update => "K_UPDATE",
            Keyword::With => "K_WITH",
            Keyword::Limit => "K_LIMIT",
            Keyword::Per => "K_PER",
            Keyword::Partition => "K_PARTITION",
            Keyword::Using => "K_USING",
            Keyword::Use => "K_USE",
            Keyword::Distinct => "K_DISTINCT",
            Keyword::Count => "K_COUNT",
            Keyword::Set => "K_SET",
            Keyword::Begin => "K_BEGIN",
            Keyword::Unlogged => "K_UNLOGGED",
            Keyword::Batch => "K_BATCH",
            Keyword::Apply => "K_APPLY",
            Keyword::Truncate => "K_TRUNCATE",
            Keyword::Delete => "K_DELETE",
            Keyword::In => "K_IN",
            Keyword::Create => "K_CREATE",
            Keyword::Schema => "K_SCHEMA",
            Keyword::Keyspace => "K_KEYSPACE",
            Keyword::Keyspaces => "K_KEYSPACES",
            Keyword::Table => "K_COLUMNFAMILY",
            Keyword::Tables => "K_TABLES",
            Keyword::Materialized => "K_MATERIALIZED",
            Keyword::View => "K_VIEW",
            Keyword::Index => "K_INDEX",
            Keyword::Custom => "K_CUSTOM",
            Keyword::On => "K_ON",
            Keyword::To => "K_TO",
            Keyword::Drop => "K_DROP",
            Keyword::Primary => "K_PRIMARY",
            Keyword::Into => "K_INTO",
            Keyword::Values => "K_VALUES",
            Keyword::Timestamp => "K_TIMESTAMP",
            Keyword::Ttl => "K_TTL",
            Keyword::Cast => "K_CAST",
            Keyword::Alter => "K_ALTER",
            Keyword::Rename => "K_RENAME",
            Keyword::Add => "K_ADD",
            Keyword::Type => "K_TYPE",
            Keyword::Types => "K_TYPES",
            Keyword::Compact => "K_COMPACT",
            Keyword::Storage => "K_STORAGE",
            Keyword::Order => "K_ORDER",
            Keyword::By => "K_BY",
            Keyword::Asc => "K_ASC",
            Keyword::Desc => "K_DESC",
            Keyword::Allow => "K_ALLOW",
            Keyword::Filtering => "K_FILTERING",
            Keyword::If => "K_IF",
            Keyword::Is => "K_IS",
            Keyword::Contains => "K_CONTAINS",
            Keyword::Between => "K_BETWEEN",
            Keyword::Group => "K_GROUP",
            Keyword::Cluster => "K_CLUSTER",
            Keyword::Internals => "K_INTERNALS",
            Keyword::Only => "K_ONLY",
            Keyword::Grant => "K_GRANT",
            Keyword::All => "K_ALL",
            Keyword::Permission => "K_PERMISSION",
            Keyword::Permissions => "K_PERMISSIONS",
            Keyword::Of => "K_OF",
            Keyword::Revoke => "K_REVOKE",
            Keyword::Modify => "K_MODIFY",
            Keyword::Authorize => "K_AUTHORIZE",
            Keyword::Describe => "K_DESCRIBE",
            Keyword::Execute => "K_EXECUTE",
            Keyword::Norecursive => "K_NORECURSIVE",
            Keyword::Mbean => "K_MBEAN",
            Keyword::Mbeans => "K_MBEANS",
            Keyword::User => "K_USER",
            Keyword::Users => "K_USERS",
            Keyword::Role => "K_ROLE",
            Keyword::Roles => "K_ROLES",
            Keyword::Superusers => "K_SUPERUSERS",
            Keyword::Superuser => "K_SUPERUSER",
            Keyword::Nosuperuser => "K_NOSUPERUSER",
            Keyword::Generated => "K_GENERATED",
            Keyword::Password => "K_PASSWORD",
            Keyword::Hashed => "K_HASHED",
            Keyword::Login => "K_LOGIN",
            Keyword::Nologin => "K_NOLOGIN",
            Keyword::Options => "K_OPTIONS",
            Keyword::Access => "K_ACCESS",
            Keyword::Datacenters => "K_DATACENTERS",
            Keyword::Cidrs => "K_CIDRS",
            Keyword::Identity => "K_IDENTITY",
            Keyword::Clustering => "K_CLUSTERING",
            Keyword::Ascii => "K_ASCII",
            Keyword::Bigint => "K_BIGINT",
            Keyword::Blob => "K_BLOB",
            Keyword::Boolean => "K_BOOLEAN",
            Keyword::Counter => "K_COUNTER",
            Keyword::Decimal => "K_DECIMAL",
            Keyword::Double => "K_DOUBLE",
            Keyword::Duration => "K_DURATION",
            Keyword::Float => "K_FLOAT",
            Keyword::Inet => "K_INET",
            Keyword::Int => "K_INT",
            Keyword::Smallint => "K_SMALLINT",
            Keyword::Tinyint => "K_TINYINT",
            Keyword::Text => "K_TEXT",
            Keyword::Uuid => "K_UUID",
            Keyword::Varchar => "K_VARCHAR",
            Keyword::Varint => "K_VARINT",
            Keyword::Timeuuid => "K_TIMEUUID",
            Keyword::Token => "K_TOKEN",
            Keyword::Writetime => "K_WRITETIME",
            Keyword::Maxwritetime => "K_MAXWRITETIME",
            Keyword::Date => "K_DATE",
            Keyword::Time => "K_TIME",
            Keyword::Null => "K_NULL",
            Keyword::Not => "K_NOT",
            Keyword::Exists => "K_EXISTS",
            Keyword::Map => "K_MAP",
            Keyword::List => "K_LIST",
            Keyword::Nan => "K_POSITIVE_NAN",
            Keyword::Infinity => "K_POSITIVE_INFINITY",
            Keyword::Tuple => "K_TUPLE",
            Keyword::Trigger => "K_TRIGGER",
            Keyword::Static => "K_STATIC",
            Keyword::Frozen => "K_FROZEN",
            Keyword::Function => "K_FUNCTION",
            Keyword::Functions => "K_FUNCTIONS",
            Keyword::Aggregate => "K_AGGREGATE",
            Keyword::Aggregates => "K_AGGREGATES",
            Keyword::Sfunc => "K_SFUNC",
            Keyword::Stype => "K_STYPE",
            Keyword::Finalfunc => "K_FINALFUNC",
            Keyword::Initcond => "K_INITCOND",
            Keyword::Returns => "K_RETURNS",
            Keyword::Called => "K_CALLED",
            Keyword::Input => "K_INPUT",
            Keyword::Language => "K_LANGUAGE",
            Keyword::Or => "K_OR",
            Keyword::Replace => "K_REPLACE",
            Keyword::Json => "K_JSON",
            Keyword::Default => "K_DEFAULT",
            Keyword::Unset => "K_UNSET",
            Keyword::Like => "K_LIKE",
            Keyword::Masked => "K_MASKED",
            Keyword::Unmask => "K_UNMASK",
            Keyword::SelectMasked => "K_SELECT_MASKED",
            Keyword::Vector => "K_VECTOR",
            Keyword::Ann => "K_ANN",
            Keyword::Check => "K_CHECK",
            Keyword::Indexes => "K_INDEXES",
        }
    }

    /// `basic_unreserved_keyword`: usable as any identifier, including type names.
    pub fn is_basic_unreserved(self) -> bool {
        matches!(
            self,
            Keyword::Keys
                | Keyword::As
                | Keyword::Cluster
                | Keyword::Clustering
                | Keyword::Compact
                | Keyword::Storage
                | Keyword::Tables
                | Keyword::Type
                | Keyword::Types
                | Keyword::Values
                | Keyword::Map
                | Keyword::List
                | Keyword::Filtering
                | Keyword::Permission
                | Keyword::Permissions
                | Keyword::Keyspaces
                | Keyword::All
                | Keyword::User
                | Keyword::Users
                | Keyword::Role
                | Keyword::Roles
                | Keyword::Identity
                | Keyword::Superuser
                | Keyword::Superusers
                | Keyword::Nosuperuser
                | Keyword::Login
                | Keyword::Nologin
                | Keyword::Options
                | Keyword::Password
                | Keyword::Generated
                | Keyword::Hashed
                | Keyword::Exists
                | Keyword::Custom
                | Keyword::Trigger
                | Keyword::Contains
                | Keyword::Internals
                | Keyword::Only
                | Keyword::Static
                | Keyword::Frozen
                | Keyword::Tuple
                | Keyword::Function
                | Keyword::Functions
                | Keyword::Aggregate
                | Keyword::Aggregates
                | Keyword::Sfunc
                | Keyword::Stype
                | Keyword::Finalfunc
                | Keyword::Initcond
                | Keyword::Returns
                | Keyword::Language
                | Keyword::Called
                | Keyword::Input
                | Keyword::Like
                | Keyword::Per
                | Keyword::Partition
                | Keyword::Group
                | Keyword::Datacenters
                | Keyword::Cidrs
                | Keyword::Access
                | Keyword::Default
                | Keyword::Mbean
                | Keyword::Mbeans
                | Keyword::Replace
                | Keyword::Unset
                | Keyword::Masked
                | Keyword::Unmask
                | Keyword::SelectMasked
                | Keyword::Vector
                | Keyword::Ann
                | Keyword::Between
                | Keyword::Check
                | Keyword::Indexes
        )
    }

    /// `unreserved_keyword`: usable as a column, table, keyspace … name.
    pub fn is_unreserved(self) -> bool {
        self.is_basic_unreserved()
            || self.native_type().is_some()
            || matches!(
                self,
                Keyword::Ttl
                    | Keyword::Count
                    | Keyword::Writetime
                    | Keyword::Maxwritetime
                    | Keyword::Key
                    | Keyword::Cast
                    | Keyword::Json
                    | Keyword::Distinct
            )
    }

    /// `unreserved_function_keyword` plus TOKEN and COUNT: usable as a function name.
    pub fn is_function_name(self) -> bool {
        self.is_basic_unreserved()
            || self.native_type().is_some()
            || matches!(self, Keyword::Token | Keyword::Count)
    }

    /// The native type this keyword names, if any.
    pub fn native_type(self) -> Option<NativeType> {
        Some(match self {
            Keyword::Ascii => NativeType::Ascii,
            Keyword::Bigint => NativeType::Bigint,
            Keyword::Blob => NativeType::Blob,
            Keyword::Boolean => NativeType::Boolean,
            Keyword::Counter => NativeType::Counter,
            Keyword::Decimal => NativeType::Decimal,
            Keyword::Double => NativeType::Double,
            Keyword::Duration => NativeType::Duration,
            Keyword::Float => NativeType::Float,
            Keyword::Inet => NativeType::Inet,
            Keyword::Int => NativeType::Int,
            Keyword::Smallint => NativeType::Smallint,
            Keyword::Text => NativeType::Text,
            Keyword::Timestamp => NativeType::Timestamp,
            Keyword::Tinyint => NativeType::Tinyint,
            Keyword::Uuid => NativeType::Uuid,
            Keyword::Varchar => NativeType::Varchar,
            Keyword::Varint => NativeType::Varint,
            Keyword::Timeuuid => NativeType::Timeuuid,
            Keyword::Date => NativeType::Date,
            Keyword::Time => NativeType::Time,
            _ => return None,
        })
    }
}

/// Whether `word` (lower case) is a reserved keyword, i.e. must be quoted as an identifier.
/// `true`, `false`, `nan` and `infinity` count as reserved.
pub fn is_reserved_word(word: &str) -> bool {
    if matches!(word, "true" | "false") {
        return true;
    }
    Keyword::lookup(word).is_some_and(|k| !k.is_unreserved())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_are_sorted_and_unique() {
        for w in SPELLINGS.windows(2) {
            assert!(w[0].0 < w[1].0, "{} >= {}", w[0].0, w[1].0);
        }
        assert!(SPELLINGS.iter().all(|(s, _)| s.len() <= MAX_KEYWORD_LEN));
    }

    #[test]
    fn lookup_is_case_insensitive() {
        assert_eq!(Keyword::lookup("SeLeCt"), Some(Keyword::Select));
        assert_eq!(Keyword::lookup("COLUMNFAMILY"), Some(Keyword::Table));
        assert_eq!(Keyword::lookup("columnfamilies"), Some(Keyword::Tables));
        assert_eq!(Keyword::lookup("selects"), None);
        assert_eq!(Keyword::lookup("a"), None);
    }

    #[test]
    fn unreserved_keywords() {
        for w in [
            "key",
            "keys",
            "type",
            "types",
            "values",
            "filtering",
            "ttl",
            "writetime",
            "time",
            "date",
            "text",
            "timestamp",
            "count",
            "json",
            "distinct",
            "as",
            "map",
            "list",
            "all",
            "user",
        ] {
            assert!(
                Keyword::lookup(w).is_some_and(Keyword::is_unreserved),
                "{w}"
            );
        }
        for w in [
            "select", "from", "where", "token", "set", "table", "keyspace", "null", "in", "nan",
            "infinity", "primary", "not",
        ] {
            assert!(
                !Keyword::lookup(w).is_some_and(Keyword::is_unreserved),
                "{w}"
            );
        }
    }
}
