//! The control endpoint: a TCP listener on its own thread. It parses one JSON
//! request per line, checks the fabric token, and hands the request to the
//! event loop (which owns the state machine), then writes the loop's answer
//! back as one JSON line.

use anyhow::{Context, Result};
use flitnet_core::control::{Envelope, Reply, Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

/// A request waiting for the event loop, with where to send the answer.
pub struct Pending {
    pub request: Request,
    pub reply: mpsc::Sender<Response>,
}

/// Requests refused before they reached the loop.
#[derive(Default, Debug)]
pub struct ControlCounters {
    pub bad_token: AtomicU64,
    pub malformed: AtomicU64,
}

/// The event loop's side: requests arrive on `requests`, and `wake` becomes
/// readable whenever one is queued.
pub struct ControlInbox {
    pub requests: mpsc::Receiver<Pending>,
    pub wake: UnixStream,
    pub counters: Arc<ControlCounters>,
    pub local_addr: SocketAddr,
}

/// Starts the control thread on `addr`.
pub fn spawn(addr: SocketAddr, token: String) -> Result<ControlInbox> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("binding control socket {addr}"))?;
    let local_addr = listener.local_addr()?;
    let (tx, rx) = mpsc::channel();
    let (wake_rx, wake_tx) = UnixStream::pair()?;
    wake_rx.set_nonblocking(true)?;
    let counters = Arc::new(ControlCounters::default());
    let thread_counters = counters.clone();
    std::thread::Builder::new()
        .name("control".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let tx = tx.clone();
                let wake = match wake_tx.try_clone() {
                    Ok(w) => w,
                    Err(_) => continue,
                };
                let token = token.clone();
                let counters = thread_counters.clone();
                let _ = std::thread::Builder::new()
                    .name("control-conn".into())
                    .stack_size(256 * 1024)
                    .spawn(move || serve(stream, &token, &tx, wake, &counters));
            }
        })?;
    Ok(ControlInbox {
        requests: rx,
        wake: wake_rx,
        counters,
        local_addr,
    })
}

fn serve(
    stream: TcpStream,
    token: &str,
    tx: &mpsc::Sender<Pending>,
    mut wake: UnixStream,
    counters: &ControlCounters,
) {
    let peer = stream.peer_addr().ok();
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let response = match serde_json::from_str::<Envelope>(&line) {
            Err(e) => {
                counters.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(?peer, error = %e, "malformed control request");
                Response::error(format!("malformed request: {e}"))
            }
            Ok(env) if env.token != token => {
                counters.bad_token.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(?peer, "control request with a wrong token refused");
                Response::error("wrong token: request refused")
            }
            Ok(env) => {
                let (reply_tx, reply_rx) = mpsc::channel();
                if tx
                    .send(Pending {
                        request: env.request,
                        reply: reply_tx,
                    })
                    .is_err()
                {
                    break;
                }
                let _ = wake.write_all(&[1]);
                match reply_rx.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                }
            }
        };
        let mut text = serde_json::to_string(&response)
            .unwrap_or_else(|_| r#"{"error":{"message":"unserialisable response"}}"#.into());
        text.push('\n');
        if writer.write_all(text.as_bytes()).is_err() {
            break;
        }
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
}
