//! A blocking REST client for the node's admin API (docs/dev/rest-api.md).

use std::time::Duration;

use serde_json::Value;

use crate::NodetoolError;

/// Time allowed for one request; long operations (compaction) are polled instead.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Largest response body read.
pub const MAX_BODY_BYTES: u64 = 64 << 20;

pub struct Client {
    base: String,
    agent: ureq::Agent,
}

enum Method {
    Get,
    Post,
    Delete,
}

impl Client {
    pub fn new(host: &str, port: u16) -> Self {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            base: format!("http://{host}:{port}"),
            agent,
        }
    }

    pub fn get(&self, path: &str) -> Result<Value, NodetoolError> {
        self.call(Method::Get, path)
    }

    pub fn post(&self, path: &str) -> Result<Value, NodetoolError> {
        self.call(Method::Post, path)
    }

    pub fn delete(&self, path: &str) -> Result<Value, NodetoolError> {
        self.call(Method::Delete, path)
    }

    /// GET that also returns the HTTP status (for endpoints where 408 is an answer).
    pub fn get_with_status(&self, path: &str) -> Result<(u16, Value), NodetoolError> {
        let url = format!("{}{}", self.base, path);
        let resp = self.agent.get(&url).call();
        self.read(&url, resp)
    }

    fn call(&self, m: Method, path: &str) -> Result<Value, NodetoolError> {
        let url = format!("{}{}", self.base, path);
        let resp = match m {
            Method::Get => self.agent.get(&url).call(),
            Method::Post => self.agent.post(&url).send_empty(),
            Method::Delete => self.agent.delete(&url).call(),
        };
        let (status, body) = self.read(&url, resp)?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let message = body
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| body.to_string(), str::to_owned);
        if status == 501 {
            return Err(NodetoolError::NotImplemented(message));
        }
        Err(NodetoolError::Server { status, message })
    }

    fn read(
        &self,
        url: &str,
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, Value), NodetoolError> {
        let mut resp = resp.map_err(|e| NodetoolError::Connect {
            url: url.to_owned(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_string()
            .map_err(|e| NodetoolError::Connect {
                url: url.to_owned(),
                message: e.to_string(),
            })?;
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| NodetoolError::BadResponse {
                url: url.to_owned(),
                message: format!("{e}: {}", text.chars().take(200).collect::<String>()),
            })?
        };
        Ok((status, body))
    }
}

/// Percent-encodes a query or path value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
