//! Logging with levels that can be changed while the node runs (`nodetool
//! setlogginglevel` / `getlogginglevels`, REST `/system/logger`).
//!
//! [`init`] installs the global `tracing` subscriber (one line per event, as the binary
//! always did) behind a reloadable filter. The filter is a list of directives: a root
//! level plus `target=level` pairs (targets are module paths such as `amphora_storage` or
//! `amphora_server::transport`), the `RUST_LOG` syntax.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// Levels accepted by [`set_level`].
pub const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error(
        "runtime log levels are not available: the process did not start logging with amphora_server::logging::init"
    )]
    NotInstalled,
    #[error("unknown log level '{0}' (trace, debug, info, warn, error, off)")]
    BadLevel(String),
    #[error("invalid logger name '{0}'")]
    BadTarget(String),
    #[error("cannot apply the log filter: {0}")]
    Reload(String),
}

/// The directives in force: a root level and per-target levels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Levels {
    pub root: String,
    pub targets: BTreeMap<String, String>,
}

impl Levels {
    /// Parses `RUST_LOG`-style text (`info,amphora_storage=debug`); unknown parts are kept
    /// as they are.
    pub fn parse(s: &str) -> Levels {
        let mut l = Levels {
            root: "info".into(),
            targets: BTreeMap::new(),
        };
        for d in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match d.split_once('=') {
                Some((t, lv)) => {
                    l.targets.insert(t.to_owned(), lv.to_ascii_lowercase());
                }
                None => l.root = d.to_ascii_lowercase(),
            }
        }
        l
    }

    pub fn directives(&self) -> String {
        let mut s = self.root.clone();
        for (t, lv) in &self.targets {
            s.push_str(&format!(",{t}={lv}"));
        }
        s
    }
}

struct Installed {
    handle: reload::Handle<EnvFilter, Registry>,
    initial: Levels,
    current: Mutex<Levels>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Installs the global subscriber: `RUST_LOG` (else `default_level`) through a reloadable
/// filter, one line per event on stderr, without targets. Call once, at process start.
pub fn init(default_level: &str) {
    let text = std::env::var("RUST_LOG").unwrap_or_else(|_| default_level.into());
    let initial = Levels::parse(&text);
    let filter =
        EnvFilter::try_new(initial.directives()).unwrap_or_else(|_| EnvFilter::new("info"));
    let (layer, handle) = reload::Layer::new(filter);
    let installed = tracing_subscriber::registry()
        .with(layer)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .try_init()
        .is_ok();
    if installed {
        let _ = INSTALLED.set(Installed {
            handle,
            current: Mutex::new(initial.clone()),
            initial,
        });
    }
}

/// The levels in force.
pub fn levels() -> Result<Levels, LoggingError> {
    let i = INSTALLED.get().ok_or(LoggingError::NotInstalled)?;
    Ok(i.current
        .lock()
        .map(|g| g.clone())
        .unwrap_or_else(|p| p.into_inner().clone()))
}

/// Sets `target`'s level (the root level without a target). `level` `None` removes the
/// target's own level; with neither, the levels go back to those at start.
pub fn set_level(target: Option<&str>, level: Option<&str>) -> Result<Levels, LoggingError> {
    let i = INSTALLED.get().ok_or(LoggingError::NotInstalled)?;
    let next = next_levels(&levels()?, &i.initial, target, level)?;
    let filter =
        EnvFilter::try_new(next.directives()).map_err(|e| LoggingError::Reload(e.to_string()))?;
    i.handle
        .reload(filter)
        .map_err(|e| LoggingError::Reload(e.to_string()))?;
    if let Ok(mut g) = i.current.lock() {
        *g = next.clone();
    }
    tracing::info!(filter = %next.directives(), "log levels changed");
    Ok(next)
}

/// The levels after a change (pure, for tests).
pub fn next_levels(
    current: &Levels,
    initial: &Levels,
    target: Option<&str>,
    level: Option<&str>,
) -> Result<Levels, LoggingError> {
    let level = match level {
        Some(l) => {
            let l = l.to_ascii_lowercase();
            if !LEVELS.contains(&l.as_str()) {
                return Err(LoggingError::BadLevel(l));
            }
            Some(l)
        }
        None => None,
    };
    let target = target
        .map(str::trim)
        .filter(|t| !t.is_empty() && *t != "ROOT");
    if let Some(t) = target
        && !t
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(LoggingError::BadTarget(t.to_owned()));
    }
    let mut next = current.clone();
    match (target, level) {
        (None, None) => return Ok(initial.clone()),
        (None, Some(l)) => next.root = l,
        (Some(t), Some(l)) => {
            next.targets.insert(t.to_owned(), l);
        }
        (Some(t), None) => {
            next.targets.remove(t);
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_round_trip_and_change() {
        let init = Levels::parse("info,amphora_storage=debug");
        assert_eq!(init.directives(), "info,amphora_storage=debug");
        let n = next_levels(
            &init,
            &init,
            Some("amphora_server::transport"),
            Some("TRACE"),
        )
        .expect("set");
        assert_eq!(
            n.directives(),
            "info,amphora_server::transport=trace,amphora_storage=debug"
        );
        let n = next_levels(&n, &init, None, Some("warn")).expect("root");
        assert_eq!(n.root, "warn");
        let n = next_levels(&n, &init, Some("amphora_storage"), None).expect("remove");
        assert!(!n.targets.contains_key("amphora_storage"));
        assert_eq!(next_levels(&n, &init, None, None).expect("reset"), init);
        assert!(matches!(
            next_levels(&n, &init, None, Some("loud")),
            Err(LoggingError::BadLevel(_))
        ));
        assert!(matches!(
            next_levels(&n, &init, Some("a=b"), Some("info")),
            Err(LoggingError::BadTarget(_))
        ));
        assert!(matches!(levels(), Err(LoggingError::NotInstalled)));
    }
}
