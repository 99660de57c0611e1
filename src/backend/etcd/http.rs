//! A minimal blocking HTTP/1.1 client for etcd's JSON gateway: one POST per
//! connection (`Connection: close`), a JSON body out, a JSON body back,
//! every step bounded by a deadline.
//!
//! Why not a crate: lockrun talks to one kind of server on loopback or a
//! LAN, with plain HTTP and small bodies. A full client (or an async
//! runtime, or gRPC with protoc) would multiply the build and the binary for
//! that; this is a socket, a request line and a chunked-body decoder.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Bodies bigger than this are not etcd answers lockrun asked for.
const MAX_RESPONSE: usize = 4 << 20;

#[derive(Debug)]
pub enum HttpError {
    /// No connection could be made: nothing was sent.
    Connect(io::Error),
    /// The deadline passed (connected, but no complete answer).
    Timeout,
    Io(io::Error),
    /// The server answered, but not with 200: gRPC-gateway puts the gRPC
    /// error message in the body.
    Status(u16, String),
    Malformed(&'static str),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Connect(e) => write!(f, "cannot connect: {e}"),
            HttpError::Timeout => f.write_str("no answer in time"),
            HttpError::Io(e) => write!(f, "{e}"),
            HttpError::Status(code, message) => write!(f, "HTTP {code}: {message}"),
            HttpError::Malformed(what) => write!(f, "malformed HTTP answer: {what}"),
        }
    }
}

/// POSTs `body` to `http://ENDPOINT/PATH`; returns the response body.
/// `deadline` bounds everything, connecting included; `None` waits as long
/// as the server takes (a lock wait).
pub fn post(
    endpoint: &str,
    path: &str,
    body: &[u8],
    deadline: Option<Instant>,
) -> Result<Vec<u8>, HttpError> {
    let mut stream = connect(endpoint, deadline)?;
    let _ = stream.set_nodelay(true);
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    set_timeouts(&stream, deadline)?;
    stream.write_all(&request).map_err(io_error)?;

    let mut response = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        set_timeouts(&stream, deadline)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                response.extend_from_slice(&buf[..n]);
                if response.len() > MAX_RESPONSE {
                    return Err(HttpError::Malformed("answer too large"));
                }
                // The gateway may keep the stream open after a complete
                // chunked body; stop as soon as the body is complete.
                if complete(&response) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(e)),
        }
    }
    parse_response(&response)
}

fn connect(endpoint: &str, deadline: Option<Instant>) -> Result<TcpStream, HttpError> {
    let addrs = endpoint.to_socket_addrs().map_err(HttpError::Connect)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address for this endpoint");
    for addr in addrs {
        let result = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => TcpStream::connect_timeout(&addr, left),
                _ => return Err(HttpError::Timeout),
            },
            None => TcpStream::connect(addr),
        };
        match result {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(HttpError::Connect(last))
}

fn set_timeouts(stream: &TcpStream, deadline: Option<Instant>) -> Result<(), HttpError> {
    let left = match deadline {
        None => None,
        Some(d) => match d.checked_duration_since(Instant::now()) {
            Some(left) if left >= Duration::from_millis(1) => Some(left),
            _ => return Err(HttpError::Timeout),
        },
    };
    stream.set_read_timeout(left).map_err(HttpError::Io)?;
    stream.set_write_timeout(left).map_err(HttpError::Io)
}

fn io_error(e: io::Error) -> HttpError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HttpError::Timeout,
        _ => HttpError::Io(e),
    }
}

fn split_head(response: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((&response[..at], &response[at + 4..]))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// Whether `response` already holds a whole answer.
fn complete(response: &[u8]) -> bool {
    split_head(response).is_some_and(|(head, body)| {
        whole_body(&String::from_utf8_lossy(head), body, false).is_some()
    })
}

fn parse_response(response: &[u8]) -> Result<Vec<u8>, HttpError> {
    let (head, body) = split_head(response).ok_or(HttpError::Malformed("no header end"))?;
    let head = String::from_utf8_lossy(head);
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(HttpError::Malformed("no status code"))?;
    let body = whole_body(&head, body, true).ok_or(HttpError::Malformed("truncated body"))?;
    if status != 200 {
        return Err(HttpError::Status(status, error_message(&body)));
    }
    Ok(body)
}

/// The body, once all of it is there: chunked, or as long as its
/// Content-Length, or (with neither) whatever came before the end of the
/// stream. `None` while incomplete.
fn whole_body(head: &str, body: &[u8], at_end: bool) -> Option<Vec<u8>> {
    if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return dechunk(body);
    }
    match header(head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(len) => body.get(..len).map(<[u8]>::to_vec),
        None => at_end.then(|| body.to_vec()),
    }
}

/// gRPC-gateway's error body is `{"error":..,"message":..,"code":..}`.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    parsed
        .as_ref()
        .and_then(|v| v.get("message").or_else(|| v.get("error")))
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect())
}

/// Joins a chunked body; `None` until the last (empty) chunk has arrived.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_chunked_answer() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert!(complete(raw));
        assert_eq!(parse_response(raw).unwrap(), b"hello world");
        assert!(!complete(&raw[..raw.len() - 5]));
    }

    #[test]
    fn reads_a_sized_answer_and_errors() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(parse_response(raw).unwrap(), b"{}");
        let raw = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 35\r\n\r\n{\"error\":\"x\",\"message\":\"bad thing\"}";
        match parse_response(raw) {
            Err(HttpError::Status(400, m)) => assert_eq!(m, "bad thing"),
            other => panic!("{other:?}"),
        }
    }
}
