//! One webhook connection's defences: what it is doing (requests in flight, answers not yet
//! written, writes blocked), the watchdog that ends it when a phase overruns its deadline, the
//! read-ahead of the connections the API server is likely to use, the lingering close of a
//! connection answered before its body was read, and the per-peer connection count.
//!
//! Every phase of a request has a deadline, so no client can hold a connection, a review slot
//! or memory for longer than those deadlines add up to, whatever it does:
//! - the TLS handshake, and the first bytes after it: the header timeout;
//! - an HTTP/1.1 header: the header timeout (hyper);
//! - the body: the body timeout ([`super::server`]'s admission);
//! - the answer, from the handler's return until its last byte is handed on (an HTTP/2 stream
//!   whose flow-control window the client keeps shut), and any write the transport cannot take
//!   (a client that does not read its socket): the answer timeout, after which the connection
//!   is dropped, freeing every share its requests held;
//! - between requests: the idle timeout, counted from the last request's end, so that PINGs
//!   or other frames that are no request do not keep a connection open.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The deadlines a connection's watchdog keeps ([`Conn::watch`]).
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// Before any traffic: the header timeout.
    pub first_bytes: Duration,
    /// With no request in flight, from the last one's end.
    pub idle: Duration,
    /// For an answer to be written, and for the transport to take writes again.
    pub answer: Duration,
}

/// Length of the HTTP/2 connection preface: until this many bytes came, the protocol of a
/// connection may still be unknown, which the HTTP/1.1 header timeout does not cover.
const PREFACE_LEN: u64 = 24;

/// How long a connection answered before its body was read keeps reading (and discarding) what
/// the client still sends, after its answer and the end of its writing side, at most: the
/// client then reads the answer before the connection closes, instead of losing it to the
/// reset that closing a socket with unread data sends (nginx's lingering close).
const LINGER: Duration = Duration::from_secs(5);
/// The most bytes discarded so: twice the largest body.
const LINGER_BYTES: usize = 10 * 1024 * 1024;

/// What a connection is doing, shared by its task, its transport and its requests (a request
/// finds it in its extensions).
pub struct Conn {
    epoch: Instant,
    /// Bytes read, while fewer than [`PREFACE_LEN`] (the count stops there).
    read: AtomicU64,
    /// Milliseconds since `epoch`, plus one, since which writes have been refused by the
    /// transport; 0 while they are not.
    blocked: AtomicU64,
    /// Requests begun and not yet answered in full.
    in_flight: AtomicU32,
    /// Whether the transport had nothing to read since the last request began: a request that
    /// begins without such a wait was already there (pipelined behind others).
    read_waited: AtomicBool,
    /// Milliseconds since `epoch` at which the last request ended.
    last_end: AtomicU64,
    /// Answers being written: their number, in order of the handler's return, and when.
    answers: Mutex<Answers>,
    /// Set when an answer went out before its request's body was read whole: the connection
    /// closes lingering.
    linger: AtomicBool,
    /// What this connection's requests may hold of the memory budget for their bodies at once
    /// (in [`super::budget`] units): HTTP/2 streams together cannot hold more.
    bodies: Arc<Semaphore>,
    /// The connection's slots, given back when the last holder of this state goes (after the
    /// lingering close).
    _slots: Vec<OwnedSemaphorePermit>,
    _peer: Option<PeerSlot>,
}

#[derive(Default)]
struct Answers {
    next: u64,
    /// Answer number -> milliseconds since `epoch` when the handler returned it.
    pending: BTreeMap<u64, u64>,
}

/// Why a connection's watchdog ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// No request for the idle timeout (the header timeout before any traffic): closed
    /// gracefully.
    Idle,
    /// An answer or a write that the client did not take within the answer timeout: dropped.
    Stalled,
}

impl Conn {
    /// The state of a new connection holding `slots` (given back when it ends).
    pub fn new(
        slots: Vec<OwnedSemaphorePermit>,
        peer: Option<PeerSlot>,
        body_units: usize,
    ) -> Arc<Conn> {
        Arc::new(Conn {
            epoch: Instant::now(),
            read: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            read_waited: AtomicBool::new(true),
            last_end: AtomicU64::new(0),
            answers: Mutex::default(),
            linger: AtomicBool::new(false),
            bodies: Arc::new(Semaphore::new(body_units)),
            _slots: slots,
            _peer: peer,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Whether a request beginning now was already read, behind others, rather than awaited:
    /// such a request waits for its turn behind the other connections' (see [`Tracking`]).
    fn queued(&self) -> bool {
        !self.read_waited.swap(false, Relaxed)
    }

    /// A request begins: it is in flight until the returned guard goes.
    pub fn begin(self: &Arc<Conn>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight {
            conn: self.clone(),
            answer: None,
        }
    }

    /// The answer goes out before its request's body was read whole.
    pub fn answered_early(&self) {
        self.linger.store(true, Relaxed);
    }

    /// Holds `bytes` in all for a body on its way, of this connection's part and of its peer's
    /// part (in addition to the memory budget); false, holding nothing more, when either is
    /// held by other bodies.
    pub fn hold_body(&self, hold: &mut BodyHold, bytes: usize) -> bool {
        let needed = bytes.div_ceil(super::budget::UNIT);
        if needed <= hold.units {
            return true;
        }
        let extra = (needed - hold.units) as u32;
        let peer = self._peer.as_ref().map(|p| &p.bodies);
        let mut got = Vec::with_capacity(2);
        for part in std::iter::once(&self.bodies).chain(peer) {
            match part.clone().try_acquire_many_owned(extra) {
                Ok(permit) => got.push(permit),
                Err(_) => return false,
            }
        }
        hold.permits.extend(got);
        hold.units = needed;
        true
    }

    fn read(&self, n: usize) {
        if self.read.load(Relaxed) < PREFACE_LEN {
            self.read.fetch_add(n as u64, Relaxed);
        }
    }

    fn wrote(&self, blocked: bool) {
        if blocked {
            let since = self.now_ms() + 1;
            let _ = self.blocked.compare_exchange(0, since, Relaxed, Relaxed);
        } else if self.blocked.load(Relaxed) != 0 {
            self.blocked.store(0, Relaxed);
        }
    }

    /// The deadlines running on this connection, and what the watchdog does at each.
    fn due(&self, limits: &Deadlines) -> Vec<(Instant, Ending)> {
        let mut due = Vec::with_capacity(3);
        if let Some(&started) = self.answers.lock().unwrap().pending.values().next() {
            due.push((self.at(started) + limits.answer, Ending::Stalled));
        }
        let blocked = self.blocked.load(Relaxed);
        if blocked != 0 {
            due.push((self.at(blocked - 1) + limits.answer, Ending::Stalled));
        }
        if self.in_flight.load(Relaxed) == 0 {
            let limit = if self.read.load(Relaxed) < PREFACE_LEN {
                limits.first_bytes
            } else {
                limits.idle
            };
            due.push((self.at(self.last_end.load(Relaxed)) + limit, Ending::Idle));
        }
        due
    }

    /// Resolves when the connection must end, and why.
    pub async fn watch(&self, limits: Deadlines) -> Ending {
        // A phase that begins after a look is seen at the next one: its deadline is overrun by
        // at most this much.
        let tick = limits
            .first_bytes
            .min(limits.idle)
            .min(limits.answer)
            .min(Duration::from_secs(4))
            / 4;
        loop {
            let now = Instant::now();
            let mut next = now + tick;
            for (at, ending) in self.due(&limits) {
                if at <= now {
                    return ending;
                }
                next = next.min(at);
            }
            tokio::time::sleep_until(next).await;
        }
    }
}

/// A request in flight on a [`Conn`]; its end is counted when this goes.
pub struct InFlight {
    conn: Arc<Conn>,
    /// The answer's number once the handler returned it.
    answer: Option<u64>,
}

impl InFlight {
    /// The handler returned the answer: it is written from now on, under the answer timeout.
    pub fn answering(&mut self) {
        let mut answers = self.conn.answers.lock().unwrap();
        let n = answers.next;
        answers.next += 1;
        answers.pending.insert(n, self.conn.now_ms());
        self.answer = Some(n);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(n) = self.answer {
            self.conn.answers.lock().unwrap().pending.remove(&n);
        }
        self.conn.last_end.fetch_max(self.conn.now_ms(), Relaxed);
        self.conn.in_flight.fetch_sub(1, Relaxed);
    }
}

/// What a body on its way holds of its connection's and its peer's parts ([`Conn::hold_body`]),
/// given back when it goes.
#[derive(Default)]
pub struct BodyHold {
    permits: Vec<OwnedSemaphorePermit>,
    units: usize,
}

/// An answer's body, counted as being written until it is done (or dropped with its stream).
pub struct Answer {
    pub body: Body,
    pub _in_flight: InFlight,
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The webhook application of one connection: every request is counted in the connection's
/// [`Conn`], which it finds in its extensions, until its answer is written.
#[derive(Clone)]
pub struct Tracking {
    pub app: axum::Router,
    pub conn: Arc<Conn>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Tracking {
    type Response = http::Response<Answer>;
    type Error = std::convert::Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, mut req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let mut in_flight = self.conn.begin();
        let queued = self.conn.queued();
        req.extensions_mut().insert(self.conn.clone());
        // A Router is always ready.
        let answered = tower::Service::call(&mut self.app.clone(), req);
        Box::pin(async move {
            // A request that was already read behind others (HTTP/1.1 pipelining) goes to the
            // back of the scheduler's queue first: each connection gets one request judged per
            // round, so a client pipelining thousands cannot make another's wait behind them.
            // The API server sends a request once the previous answer came: never queued.
            if queued {
                tokio::task::yield_now().await;
            }
            let Ok(response) = answered.await;
            in_flight.answering();
            Ok(response.map(|body| Answer {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// A connection's transport, telling its [`Conn`] what it reads and whether its writes go
/// through. When it goes and the connection was answered before a body was read whole, the
/// socket is closed lingering ([`LINGER`]).
pub struct Tracked<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> {
    pub inner: Option<tokio_rustls::server::TlsStream<S>>,
    pub conn: Arc<Conn>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Tracked<S> {
    fn inner(&mut self) -> Pin<&mut tokio_rustls::server::TlsStream<S>> {
        Pin::new(self.inner.as_mut().expect("present until dropped"))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner().poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.conn.read(read);
        }
        if polled.is_pending() {
            self.conn.read_waited.store(true, Relaxed);
        }
        polled
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = self.inner().poll_write(cx, buf);
        self.conn.wrote(polled.is_pending());
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = self.inner().poll_write_vectored(cx, bufs);
        self.conn.wrote(polled.is_pending());
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = self.inner().poll_flush(cx);
        self.conn.wrote(polled.is_pending());
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner().poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Drop for Tracked<S> {
    fn drop(&mut self) {
        let Some(tls) = self.inner.take() else {
            return;
        };
        if !self.conn.linger.load(Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The connection's slots stay held while it lingers.
        let conn = self.conn.clone();
        runtime.spawn(async move {
            let _conn = conn;
            linger(tls.into_inner().0).await;
        });
    }
}

/// Ends the writing side of `io` (the answer and TLS close_notify went before), then reads and
/// discards what the client still sends until it closes, for [`LINGER`] and [`LINGER_BYTES`]
/// at most.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(mut io: S) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + LINGER;
    let _ = tokio::time::timeout_at(deadline, io.shutdown()).await;
    let mut scratch = vec![0; 16 * 1024];
    let mut discarded = 0;
    while discarded < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, io.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => break,
        }
    }
}

/// A TCP stream that reads ahead into a buffer of its own once [`ReadAhead::enable`]d (rustls
/// asks its transport for 4 KiB at a time: a large review then takes a few system calls
/// instead of one per 4 KiB).
pub struct ReadAhead<S> {
    inner: S,
    buf: Box<[u8]>,
    pos: usize,
    filled: usize,
    /// The slot the buffer takes, given back with it.
    _slot: Option<OwnedSemaphorePermit>,
}

impl<S> ReadAhead<S> {
    pub fn new(inner: S) -> ReadAhead<S> {
        ReadAhead {
            inner,
            buf: Box::default(),
            pos: 0,
            filled: 0,
            _slot: None,
        }
    }

    /// Reads ahead up to `capacity` bytes from now on, holding `slot`.
    pub fn enable(&mut self, capacity: usize, slot: OwnedSemaphorePermit) {
        debug_assert!(self.pos == self.filled);
        self.buf = vec![0; capacity].into_boxed_slice();
        self._slot = Some(slot);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.pos == this.filled {
            if out.remaining() >= this.buf.len() {
                // Nothing to gain from the buffer (or there is none).
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            let mut buf = ReadBuf::new(&mut this.buf);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf))?;
            this.filled = buf.filled().len();
            this.pos = 0;
        }
        let n = (this.filled - this.pos).min(out.remaining());
        out.put_slice(&this.buf[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What each peer address holds: its connections, each peer at most `max`, and the part of the
/// memory budget that the bodies on their way of all its connections may hold together.
#[derive(Clone)]
pub struct Peers {
    open: Arc<Mutex<HashMap<IpAddr, Peer>>>,
    max: usize,
    body_units: usize,
}

struct Peer {
    connections: usize,
    bodies: Arc<Semaphore>,
}

/// One connection of a peer, counted until it goes.
pub struct PeerSlot {
    peers: Peers,
    addr: IpAddr,
    bodies: Arc<Semaphore>,
}

impl Peers {
    /// At most `max` connections per peer, whose bodies hold at most `body_units` of the budget.
    pub fn new(max: usize, body_units: usize) -> Peers {
        Peers {
            open: Arc::default(),
            max: max.max(1),
            body_units,
        }
    }

    /// A slot for one more connection of `addr`, unless it has `max` open.
    pub fn take(&self, addr: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open.lock().unwrap();
        let peer = open.entry(addr).or_insert_with(|| Peer {
            connections: 0,
            bodies: Arc::new(Semaphore::new(self.body_units)),
        });
        if peer.connections >= self.max {
            return None;
        }
        peer.connections += 1;
        Some(PeerSlot {
            peers: self.clone(),
            addr,
            bodies: peer.bodies.clone(),
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap();
        if let Some(peer) = open.get_mut(&self.addr) {
            peer.connections -= 1;
            if peer.connections == 0 {
                open.remove(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Deadlines {
        Deadlines {
            first_bytes: Duration::from_secs(10),
            idle: Duration::from_secs(120),
            answer: Duration::from_secs(10),
        }
    }

    async fn ends(conn: &Conn) -> (Ending, Duration) {
        let started = Instant::now();
        let ending = conn.watch(limits()).await;
        (ending, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn each_phase_ends_the_connection_at_its_deadline() {
        // Nothing sent: the header timeout.
        let conn = Conn::new(Vec::new(), None, 1);
        assert_eq!(ends(&conn).await, (Ending::Idle, Duration::from_secs(10)));
        // The preface came, then nothing: the idle timeout, from the start.
        let conn = Conn::new(Vec::new(), None, 1);
        conn.read(24);
        assert_eq!(ends(&conn).await, (Ending::Idle, Duration::from_secs(120)));

        // A request in flight is not idle, however long it lasts (its phases have deadlines
        // of their own); once it ends, the idle timeout counts from then.
        let conn = Conn::new(Vec::new(), None, 1);
        conn.read(24);
        let request = conn.begin();
        let watch = tokio::spawn({
            let conn = conn.clone();
            async move { ends(&conn).await }
        });
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!watch.is_finished());
        drop(request);
        assert_eq!(
            watch.await.unwrap(),
            (Ending::Idle, Duration::from_secs(420))
        );

        // An answer not written within the answer timeout: dropped, with requests in flight.
        let conn = Conn::new(Vec::new(), None, 1);
        conn.read(24);
        let _waiting = conn.begin();
        let mut answered = conn.begin();
        tokio::time::sleep(Duration::from_secs(3)).await;
        answered.answering();
        let (ending, after) = ends(&conn).await;
        assert_eq!(ending, Ending::Stalled);
        // Within a tick (a quarter of the shortest limit) of its deadline.
        assert!(
            (Duration::from_secs(10)..=Duration::from_millis(12_500)).contains(&after),
            "{after:?}"
        );

        // An answer written in time does not count, nor does a write blocked for a while.
        let conn = Conn::new(Vec::new(), None, 1);
        conn.read(24);
        let mut answered = conn.begin();
        answered.answering();
        drop(answered);
        conn.wrote(true);
        tokio::time::sleep(Duration::from_secs(5)).await;
        conn.wrote(false);
        assert_eq!(ends(&conn).await.0, Ending::Idle);

        // Writes refused for the answer timeout: dropped.
        let conn = Conn::new(Vec::new(), None, 1);
        conn.read(24);
        let _request = conn.begin();
        conn.wrote(true);
        conn.wrote(true);
        let (ending, after) = ends(&conn).await;
        assert_eq!(ending, Ending::Stalled);
        assert!(after <= Duration::from_millis(10_001), "{after:?}");
    }

    #[test]
    fn a_peer_opens_at_most_its_share_of_connections_and_of_the_bodies() {
        let peers = Peers::new(2, 10);
        let a: IpAddr = [127, 0, 0, 2].into();
        let b: IpAddr = [127, 0, 0, 3].into();
        let first = peers.take(a).unwrap();
        let _second = peers.take(a).unwrap();
        assert!(peers.take(a).is_none());
        let _other = peers.take(b).unwrap();
        // Bodies: each connection holds at most 6 units, the peer 10 in all.
        let conn = |peer| Conn::new(Vec::new(), Some(peer), 6);
        let (c1, c2) = (conn(first), conn(_second));
        let (mut h1, mut h2) = (BodyHold::default(), BodyHold::default());
        assert!(c1.hold_body(&mut h1, 4 * 1024));
        assert!(c1.hold_body(&mut h1, 6 * 1024));
        assert!(
            !c1.hold_body(&mut h1, 7 * 1024),
            "past the connection's part"
        );
        assert!(c2.hold_body(&mut h2, 4 * 1024));
        assert!(!c2.hold_body(&mut h2, 5 * 1024), "past the peer's part");
        assert_eq!(h2.units, 4, "nothing more held on failure");
        drop(h1);
        assert!(c2.hold_body(&mut h2, 6 * 1024));
        drop((h2, c1));
        assert!(peers.take(a).is_some());
        drop(_other);
        assert!(!peers.open.lock().unwrap().contains_key(&b));
    }
}
