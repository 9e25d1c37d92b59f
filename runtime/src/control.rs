//! The control endpoint: a TCP listener on its own thread. It parses one JSON
//! request per line, checks the fabric token, and hands the request to the
//! event loop (which owns the state machine), then writes the loop's answer
//! back as one JSON line.
//!
//! Every input is bounded, so that no local user can grow a daemon or
//! drown its log: a line is at most [`limits::MAX_CONTROL_LINE`] bytes, at
//! most [`Limits::max_connections`] connections are served at once (one
//! thread each), a connection idle for [`Limits::idle_timeout`] is closed,
//! and refused requests are logged at most [`WARNINGS_PER_WINDOW`] times
//! per [`WARNING_WINDOW`].

use anyhow::{Context, Result};
use flitnet_core::control::{limits, Envelope, Reply, Request, Response};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request waiting for the event loop, with where to send the answer.
pub struct Pending {
    pub request: Request,
    pub reply: mpsc::Sender<Response>,
    /// Who sent it (logged with what it asked for).
    pub peer: Option<SocketAddr>,
}

/// Requests refused before they reached the loop.
#[derive(Default, Debug)]
pub struct ControlCounters {
    pub bad_token: AtomicU64,
    pub malformed: AtomicU64,
    /// Lines longer than [`limits::MAX_CONTROL_LINE`].
    pub too_long: AtomicU64,
    /// Connections refused because [`Limits::max_connections`] were open.
    pub refused_connections: AtomicU64,
    /// Connections closed after [`Limits::idle_timeout`] without a request.
    pub idle_closed: AtomicU64,
}

/// The event loop's side: requests arrive on `requests`, and `wake` becomes
/// readable whenever one is queued.
pub struct ControlInbox {
    pub requests: mpsc::Receiver<Pending>,
    pub wake: UnixStream,
    pub counters: Arc<ControlCounters>,
    pub local_addr: SocketAddr,
}

/// Bounds of the control endpoint.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest request line, in bytes.
    pub max_line: usize,
    /// Connections served at once; more are answered with an error and
    /// closed. flitctl opens one per daemon per request, a sampler one per
    /// host: a handful at a time.
    pub max_connections: usize,
    /// A connection with no complete request for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: limits::MAX_CONTROL_LINE,
            max_connections: 32,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Refused requests logged per window; the rest are counted and summed up
/// in one line when the next window opens.
pub const WARNINGS_PER_WINDOW: u32 = 10;
pub const WARNING_WINDOW: Duration = Duration::from_secs(10);

/// Lets [`WARNINGS_PER_WINDOW`] warnings through per [`WARNING_WINDOW`].
#[derive(Debug)]
pub struct WarnLimiter {
    state: Mutex<(Instant, u32, u64)>,
}

impl Default for WarnLimiter {
    fn default() -> Self {
        WarnLimiter {
            state: Mutex::new((Instant::now(), 0, 0)),
        }
    }
}

impl WarnLimiter {
    /// Whether to log this warning now; logs how many were held back when
    /// a window with suppressed ones is over.
    pub fn allow(&self) -> bool {
        let mut s = self.state.lock().expect("warn limiter poisoned");
        let (started, logged, suppressed) = &mut *s;
        if started.elapsed() >= WARNING_WINDOW {
            if *suppressed > 0 {
                tracing::warn!(
                    suppressed = *suppressed,
                    "refused control requests not logged in the last {} s",
                    WARNING_WINDOW.as_secs()
                );
            }
            *started = Instant::now();
            *logged = 0;
            *suppressed = 0;
        }
        if *logged < WARNINGS_PER_WINDOW {
            *logged += 1;
            true
        } else {
            *suppressed += 1;
            false
        }
    }
}

/// Starts the control thread on `addr`.
pub fn spawn(addr: SocketAddr, token: String) -> Result<ControlInbox> {
    spawn_with(addr, token, Limits::default())
}

/// [`spawn`] with other bounds (tests use short idle timeouts).
pub fn spawn_with(addr: SocketAddr, token: String, limits: Limits) -> Result<ControlInbox> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("binding control socket {addr}"))?;
    let local_addr = listener.local_addr()?;
    let (tx, rx) = mpsc::channel();
    let (wake_rx, wake_tx) = UnixStream::pair()?;
    wake_rx.set_nonblocking(true)?;
    let counters = Arc::new(ControlCounters::default());
    let thread_counters = counters.clone();
    let open = Arc::new(AtomicUsize::new(0));
    let warnings = Arc::new(WarnLimiter::default());
    std::thread::Builder::new()
        .name("control".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            for mut stream in listener.incoming().flatten() {
                if open.load(Ordering::SeqCst) >= limits.max_connections {
                    thread_counters
                        .refused_connections
                        .fetch_add(1, Ordering::Relaxed);
                    if warnings.allow() {
                        tracing::warn!(peer = ?stream.peer_addr().ok(), limit = limits.max_connections, "control connection refused: too many open");
                    }
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                    let _ = stream.write_all(
                        error_line(&format!(
                            "too many control connections (at most {} at once)",
                            limits.max_connections
                        ))
                        .as_bytes(),
                    );
                    continue;
                }
                let conn = Connection {
                    tx: tx.clone(),
                    wake: match wake_tx.try_clone() {
                        Ok(w) => w,
                        Err(_) => continue,
                    },
                    token: token.clone(),
                    counters: thread_counters.clone(),
                    warnings: warnings.clone(),
                    limits,
                };
                open.fetch_add(1, Ordering::SeqCst);
                let open_here = open.clone();
                let spawned = std::thread::Builder::new()
                    .name("control-conn".into())
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        conn.serve(stream);
                        open_here.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    open.fetch_sub(1, Ordering::SeqCst);
                }
            }
        })?;
    Ok(ControlInbox {
        requests: rx,
        wake: wake_rx,
        counters,
        local_addr,
    })
}

fn error_line(message: &str) -> String {
    let mut text = serde_json::to_string(&Response::error(message))
        .unwrap_or_else(|_| r#"{"error":{"message":"unserialisable response"}}"#.into());
    text.push('\n');
    text
}

/// What one connection thread needs.
struct Connection {
    tx: mpsc::Sender<Pending>,
    wake: UnixStream,
    token: String,
    counters: Arc<ControlCounters>,
    warnings: Arc<WarnLimiter>,
    limits: Limits,
}

/// One line read from a connection.
enum Line {
    Text(Vec<u8>),
    TooLong,
    /// Closed, idle too long, or broken.
    End,
}

impl Connection {
    /// Reads up to a newline, at most `max_line` bytes of it.
    fn read_line(&self, reader: &mut BufReader<TcpStream>, buf: &mut Vec<u8>) -> Line {
        buf.clear();
        let limit = self.limits.max_line as u64 + 1;
        match reader.by_ref().take(limit).read_until(b'\n', buf) {
            Ok(0) => Line::End,
            Ok(_) if buf.last() == Some(&b'\n') => Line::Text(std::mem::take(buf)),
            Ok(_) if buf.len() as u64 >= limit => Line::TooLong,
            // The peer closed mid-line.
            Ok(_) => Line::End,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                Line::End
            }
            Err(_) => Line::End,
        }
    }

    fn serve(mut self, stream: TcpStream) {
        let peer = stream.peer_addr().ok();
        // Idle (no complete request) this long: closed. A client that
        // does not read its answers is cut off as well.
        let _ = stream.set_read_timeout(Some(self.limits.idle_timeout));
        let _ = stream.set_write_timeout(Some(self.limits.idle_timeout));
        let Ok(mut writer) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            let line = match self.read_line(&mut reader, &mut buf) {
                Line::End => break,
                Line::TooLong => {
                    self.counters.too_long.fetch_add(1, Ordering::Relaxed);
                    if self.warnings.allow() {
                        tracing::warn!(
                            ?peer,
                            limit = self.limits.max_line,
                            "control request line too long: connection closed"
                        );
                    }
                    let _ = writer.write_all(
                        error_line(&format!(
                            "request line longer than {} bytes: connection closed",
                            self.limits.max_line
                        ))
                        .as_bytes(),
                    );
                    break;
                }
                Line::Text(line) => line,
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Some(response) = self.answer(&line, peer) else {
                break;
            };
            let mut text = serde_json::to_string(&response)
                .unwrap_or_else(|_| r#"{"error":{"message":"unserialisable response"}}"#.into());
            text.push('\n');
            if writer.write_all(text.as_bytes()).is_err() {
                break;
            }
        }
    }

    /// The answer to one request line; None when the event loop is gone.
    fn answer(&mut self, line: &[u8], peer: Option<SocketAddr>) -> Option<Response> {
        Some(match serde_json::from_slice::<Envelope>(line) {
            Err(e) => {
                self.counters.malformed.fetch_add(1, Ordering::Relaxed);
                if self.warnings.allow() {
                    tracing::warn!(?peer, error = %e, "malformed control request");
                }
                Response::error(format!("malformed request: {e}"))
            }
            Ok(env) if env.token != self.token => {
                self.counters.bad_token.fetch_add(1, Ordering::Relaxed);
                if self.warnings.allow() {
                    tracing::warn!(?peer, "control request with a wrong token refused");
                }
                Response::error("wrong token: request refused")
            }
            Ok(env) => {
                log_accepted(&env.request, peer);
                let (reply_tx, reply_rx) = mpsc::channel();
                self.tx
                    .send(Pending {
                        request: env.request,
                        reply: reply_tx,
                        peer,
                    })
                    .ok()?;
                let _ = self.wake.write_all(&[1]);
                reply_rx.recv().ok()?
            }
        })
    }
}

/// Logs who asked for what: requests that change the daemon's state at
/// info, the frequent read-only ones (ping, report, in-flight) at debug.
fn log_accepted(request: &Request, peer: Option<SocketAddr>) {
    let op = request.op();
    if request.is_read_only() {
        tracing::debug!(?peer, op, "control request");
    } else {
        tracing::info!(?peer, op, "control request");
    }
}

/// A blocking client for the control protocol (used by `flitctl` and tests).
pub struct ControlClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    token: String,
}

impl ControlClient {
    pub fn connect(addr: SocketAddr, token: &str) -> Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))
            .with_context(|| format!("connecting to control endpoint {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
        let writer = stream.try_clone()?;
        Ok(ControlClient {
            reader: BufReader::new(stream),
            writer,
            token: token.to_string(),
        })
    }

    /// How long [`ControlClient::call`] waits for an answer (30 s unless
    /// set).
    pub fn set_timeout(&mut self, timeout: std::time::Duration) -> Result<()> {
        self.writer.set_read_timeout(Some(timeout))?;
        self.writer.set_write_timeout(Some(timeout))?;
        Ok(())
    }

    /// Sends one request and waits for its answer.
    pub fn call(&mut self, request: Request) -> Result<Response> {
        let env = Envelope {
            token: self.token.clone(),
            request,
        };
        let mut line = serde_json::to_string(&env)?;
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer)?;
        anyhow::ensure!(n > 0, "control connection closed before answering");
        serde_json::from_str(&answer).with_context(|| format!("bad control answer: {answer}"))
    }

    /// Like [`ControlClient::call`] but turns an error answer into an error.
    pub fn call_ok(&mut self, request: Request) -> Result<Reply> {
        match self.call(request)? {
            Response::Ok { body } => Ok(body),
            Response::Error { message } => anyhow::bail!("{message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn token_is_checked_and_requests_reach_the_loop() {
        let inbox = spawn("127.0.0.1:0".parse().unwrap(), "secret".into()).unwrap();
        let addr = inbox.local_addr;
        let loop_thread = std::thread::spawn(move || {
            let mut wake = inbox.wake;
            wake.set_nonblocking(false).unwrap();
            let mut b = [0u8; 1];
            wake.read_exact(&mut b).unwrap();
            let p = inbox.requests.recv().unwrap();
            assert_eq!(p.request, Request::Ping);
            assert!(p.peer.is_some_and(|a| a.ip().is_loopback()));
            p.reply.send(Response::ok()).unwrap();
            inbox.counters
        });
        let mut wrong = ControlClient::connect(addr, "guess").unwrap();
        let err = wrong.call_ok(Request::Ping).unwrap_err().to_string();
        assert!(err.contains("wrong token"), "{err}");
        let mut right = ControlClient::connect(addr, "secret").unwrap();
        right.call_ok(Request::Ping).unwrap();
        let counters = loop_thread.join().unwrap();
        assert_eq!(counters.bad_token.load(Ordering::Relaxed), 1);
        // Malformed lines get an error answer, not a dropped connection.
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(b"{not json\n").unwrap();
        let mut r = BufReader::new(raw);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("malformed request"), "{line}");
    }

    /// An inbox whose loop answers every request with ok.
    fn answering(limits: Limits) -> (SocketAddr, Arc<ControlCounters>) {
        let inbox = spawn_with("127.0.0.1:0".parse().unwrap(), "t".into(), limits).unwrap();
        let addr = inbox.local_addr;
        let counters = inbox.counters.clone();
        std::thread::spawn(move || {
            while let Ok(p) = inbox.requests.recv() {
                let _ = p.reply.send(Response::ok());
            }
        });
        (addr, counters)
    }

    fn threads_of_this_process() -> usize {
        std::fs::read_dir("/proc/self/task").unwrap().count()
    }

    #[test]
    fn a_line_over_the_limit_gets_an_error_and_the_connection_closes() {
        let (addr, counters) = answering(Limits {
            max_line: 1 << 20,
            ..Limits::default()
        });
        let mut raw = TcpStream::connect(addr).unwrap();
        // 4 MiB without a newline: the daemon reads 1 MiB + 1 and stops.
        let junk = vec![b'x'; 4 << 20];
        let writer = std::thread::spawn({
            let mut raw = raw.try_clone().unwrap();
            move || {
                let _ = raw.write_all(&junk);
            }
        });
        let mut answer = String::new();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        BufReader::new(&mut raw).read_line(&mut answer).unwrap();
        assert!(
            answer.contains("request line longer than 1048576 bytes"),
            "{answer}"
        );
        let mut rest = Vec::new();
        let _ = raw.read_to_end(&mut rest);
        let _ = writer.join();
        assert_eq!(counters.too_long.load(Ordering::Relaxed), 1);
        // A request just under the limit is still served.
        let mut ok = TcpStream::connect(addr).unwrap();
        let pad = " ".repeat((1 << 20) - 40);
        ok.write_all(format!("{{\"token\":\"t\",\"op\":\"ping\"}}{pad}\n").as_bytes())
            .unwrap();
        let mut line = String::new();
        BufReader::new(ok).read_line(&mut line).unwrap();
        assert!(line.contains("\"ok\""), "{line}");
    }

    #[test]
    fn connections_are_capped_and_idle_ones_closed() {
        let before = threads_of_this_process();
        let (addr, counters) = answering(Limits {
            max_connections: 8,
            idle_timeout: Duration::from_millis(300),
            ..Limits::default()
        });
        let idle: Vec<TcpStream> = (0..300)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        // 8 connection threads at most, plus the control and loop threads
        // (other tests of this binary run threads too: generous margin).
        let during = threads_of_this_process();
        assert!(
            during < before + 8 + 2 + 16,
            "{during} threads for 300 connections"
        );
        let mut refused = TcpStream::connect(addr).unwrap();
        let mut line = String::new();
        BufReader::new(&mut refused).read_line(&mut line).unwrap();
        assert!(line.contains("too many control connections"), "{line}");
        // The idle ones are closed after the timeout, and the endpoint
        // serves again.
        std::thread::sleep(Duration::from_millis(800));
        assert!(counters.idle_closed.load(Ordering::Relaxed) >= 8);
        // Most of the 300 (slots freed by idle closes may take a few).
        assert!(counters.refused_connections.load(Ordering::Relaxed) >= 200);
        drop(idle);
        let mut c = ControlClient::connect(addr, "t").unwrap();
        c.call_ok(Request::Ping).unwrap();
    }

    #[test]
    fn warnings_are_rate_limited() {
        let limiter = WarnLimiter::default();
        let allowed = (0..10_000).filter(|_| limiter.allow()).count();
        assert_eq!(allowed, WARNINGS_PER_WINDOW as usize);
    }
}
