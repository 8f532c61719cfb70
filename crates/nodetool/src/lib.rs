//! amphora-nodetool: `amphora nodetool <command>`, Cassandra's nodetool over the node's
//! REST admin API (docs/dev/rest-api.md) instead of JMX.
//!
//! Owns: argument parsing with Cassandra's command names and options (`-h host -p port`,
//! where the port is the REST port, default 10000), the REST calls, and output laid out as
//! Cassandra's nodetool prints it, so scripts and habits carry over. Commands the server
//! cannot do yet say so and exit with status 2; nothing is made up.
//!
//! Must never depend on: server internals (it is a pure client of the REST API).
//!
//! Key types: [`run`], [`NodetoolError`].

pub mod client;
mod commands;
pub mod format;

use std::io::Write;

pub use client::Client;

/// Exit status for a command the server cannot do yet.
pub const EXIT_UNSUPPORTED: i32 = 2;
/// Exit status for any other failure (bad arguments, unknown table, connection refused).
pub const EXIT_ERROR: i32 = 1;

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 10000;

#[derive(Debug, thiserror::Error)]
pub enum NodetoolError {
    #[error("{0}")]
    Usage(String),
    #[error("{0} is not supported yet")]
    Unsupported(String),
    /// The server answered 501 Not Implemented.
    #[error("not supported yet: {0}")]
    NotImplemented(String),
    #[error("Failed to connect to '{url}' - {message}.")]
    Connect { url: String, message: String },
    #[error("{message}")]
    Server { status: u16, message: String },
    #[error("unexpected answer from {url}: {message}")]
    BadResponse { url: String, message: String },
    #[error("{0}")]
    Failed(String),
    #[error("cannot write the output: {0}")]
    Io(#[from] std::io::Error),
}

impl NodetoolError {
    pub fn exit_code(&self) -> i32 {
        match self {
            NodetoolError::Unsupported(_) | NodetoolError::NotImplemented(_) => EXIT_UNSUPPORTED,
            _ => EXIT_ERROR,
        }
    }
}

/// Connection options shared by every command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Globals {
    pub host: String,
    pub port: u16,
}

/// Splits the global options (`-h/--host`, `-p/--port`, and the ignored `-u`, `-pw`)
/// from the command and its arguments.
pub fn parse_globals(args: &[String]) -> Result<(Globals, Vec<String>), NodetoolError> {
    let mut g = Globals {
        host: DEFAULT_HOST.into(),
        port: DEFAULT_PORT,
    };
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let mut value = |opt: &str| -> Result<String, NodetoolError> {
            match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) => Ok(v),
                None => Err(NodetoolError::Usage(format!("{opt} needs a value"))),
            }
        };
        match name {
            "-h" | "--host" => g.host = value(name)?,
            "-p" | "--port" => {
                let v = value(name)?;
                g.port = v
                    .parse()
                    .map_err(|_| NodetoolError::Usage(format!("invalid port '{v}'")))?;
            }
            "-u" | "--username" | "-pw" | "--password" | "-pwf" | "--password-file" => {
                value(name)?;
            }
            _ => rest.push(a.clone()),
        }
    }
    Ok((g, rest))
}

/// Runs `amphora nodetool <args>`; returns the process exit status.
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match run_inner(args, out) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "nodetool: {e}");
            if matches!(e, NodetoolError::Usage(_)) {
                let _ = writeln!(err, "See 'nodetool help' or 'nodetool help <command>'.");
            }
            e.exit_code()
        }
    }
}

fn run_inner(args: &[String], out: &mut dyn Write) -> Result<(), NodetoolError> {
    let (g, rest) = parse_globals(args)?;
    let Some((cmd, cmd_args)) = rest.split_first() else {
        commands::help(out)?;
        return Ok(());
    };
    let client = Client::new(&g.host, g.port);
    commands::dispatch(&client, cmd, cmd_args, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn globals_anywhere() {
        let (g, rest) = parse_globals(&s(&["-h", "10.0.0.1", "status", "-p", "10001"])).unwrap();
        assert_eq!(g.host, "10.0.0.1");
        assert_eq!(g.port, 10001);
        assert_eq!(rest, s(&["status"]));
        let (g, _) = parse_globals(&s(&["--port=7", "info"])).unwrap();
        assert_eq!(g.port, 7);
        assert!(matches!(
            parse_globals(&s(&["-p", "x", "info"])),
            Err(NodetoolError::Usage(_))
        ));
        assert!(matches!(
            parse_globals(&s(&["info", "-h"])),
            Err(NodetoolError::Usage(_))
        ));
    }

    #[test]
    fn unknown_and_unsupported_commands() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        // No server needed: these fail before any request.
        assert_eq!(run(&s(&["frobnicate"]), &mut out, &mut err), EXIT_ERROR);
        assert!(String::from_utf8_lossy(&err).contains("frobnicate"));
        err.clear();
        assert_eq!(
            run(&s(&["decommission"]), &mut out, &mut err),
            EXIT_UNSUPPORTED
        );
        assert!(String::from_utf8_lossy(&err).contains("not supported yet"));
        err.clear();
        assert_eq!(
            run(&s(&["gettimeout", "nonsense"]), &mut out, &mut err),
            EXIT_ERROR
        );
    }

    #[test]
    fn connection_refused_is_a_clear_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let mut out = Vec::new();
        let mut err = Vec::new();
        let code = run(
            &s(&["-p", &port.to_string(), "version"]),
            &mut out,
            &mut err,
        );
        assert_eq!(code, EXIT_ERROR);
        assert!(String::from_utf8_lossy(&err).contains("Failed to connect"));
    }
}
